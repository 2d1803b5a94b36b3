"""`SandboxPolicy`: the one declared set of limits every sandbox backend enforces."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# The unprivileged user untrusted code runs as (no such account exists: nothing to log into).
SANDBOX_UID = 65_432


@dataclass(frozen=True)
class SandboxPolicy:
    """What one execution may use. Every backend enforces all of it (see docs/envs/code.md).

    cpu_seconds: CPU time (RLIMIT_CPU) of each process.
    wall_seconds: wall-clock time of the whole run; past it every process is killed.
    memory_mb: address space of each process (RLIMIT_AS), and the container's memory on Docker.
    max_processes: processes and threads the run may have at once (fork bombs stop here).
    max_output_bytes: stdout and stderr together; the run is killed once it writes more.
    scratch_mb: size of the writable scratch dir (/scratch, also TMPDIR); the rest is read-only.
    max_file_mb: largest file the run may write (RLIMIT_FSIZE).
    network_allowlist: "host" or "host:port" entries the code may reach. Empty (the default)
        means no network at all: the run gets its own network namespace with only loopback.
        Otherwise the allowlisted destinations, and only they, are reachable through an HTTP
        proxy (HTTP_PROXY/HTTPS_PROXY are set; CONNECT tunnels any TCP protocol); see
        `rllm_envs.sandbox.egress`.
    """

    cpu_seconds: float = 10.0
    wall_seconds: float = 10.0
    memory_mb: int = 512
    max_processes: int = 64
    max_output_bytes: int = 1 << 20
    scratch_mb: int = 64
    max_file_mb: int = 32
    network_allowlist: tuple[str, ...] = field(default_factory=tuple)
    uid: int = SANDBOX_UID

    def __post_init__(self) -> None:
        positive = {
            "cpu_seconds": self.cpu_seconds,
            "wall_seconds": self.wall_seconds,
            "memory_mb": self.memory_mb,
            "max_processes": self.max_processes,
            "max_output_bytes": self.max_output_bytes,
            "scratch_mb": self.scratch_mb,
            "max_file_mb": self.max_file_mb,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"SandboxPolicy.{name} must be positive, got {value!r}")
        if self.uid == 0:
            raise ValueError("SandboxPolicy.uid must not be root")
        object.__setattr__(self, "network_allowlist", tuple(self.network_allowlist))

    @property
    def network(self) -> bool:
        return bool(self.network_allowlist)

    def with_limits(self, **changes: Any) -> SandboxPolicy:
        return replace(self, **changes)

    def check_files(self, files: Mapping[str, bytes]) -> None:
        """Refuse input files larger than the program itself may write (`max_file_mb`): the
        file-size limit may already hold while a backend copies them in."""
        for name, data in files.items():
            if len(data) > self.max_file_mb << 20:
                raise ValueError(
                    f"file {name!r} ({len(data)} bytes) is larger than the policy's "
                    f"max_file_mb ({self.max_file_mb})"
                )

    def rlimits(self) -> dict[str, int]:
        """Per-process limits set on the program (by the host under bwrap, the server on
        Docker)."""
        cpu = max(1, int(self.cpu_seconds + 0.999))
        return {
            "RLIMIT_CPU": cpu,
            "RLIMIT_AS": self.memory_mb << 20,
            "RLIMIT_NPROC": self.max_processes,
            "RLIMIT_FSIZE": self.max_file_mb << 20,
            "RLIMIT_NOFILE": 256,
            "RLIMIT_CORE": 0,
        }

    def describe(self) -> dict[str, Any]:
        """The effective policy as plain data, for `info["sandbox_policy"]`."""
        described = asdict(self)
        described["network_allowlist"] = list(self.network_allowlist)
        described["network"] = self.network
        described["filesystem"] = "read-only, writable /scratch"
        described["capabilities"] = "none"
        return described
