"""What a sandbox runs and what comes back: the request and the result every backend shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rllm_envs.sandbox.policy import SandboxPolicy

SCRATCH_DIR = "/scratch"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class ExecutionRequest:
    """One program run: files written to the scratch dir, then `argv` run there with `stdin`."""

    argv: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    stdin: bytes = b""
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("ExecutionRequest.argv must name a program")
        object.__setattr__(self, "argv", tuple(self.argv))


@dataclass(frozen=True)
class ExecutionResult:
    """How a run ended. `exit_code` is the program's exit status, or -signal when a signal
    ended it: -9 when the host killed it (past `wall_seconds` or the output cap) or a limit did
    (CPU time, memory on Docker), -11 on a segfault. The same on every backend (under bwrap on
    Linux < 6.15, an exit status of 129..192 also reads as a signal; see `sandbox.bwrap`)."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_truncated: bool = False
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated

    @property
    def status(self) -> str:
        """A short word for reports: ok, timeout, output_limit, killed, or exit N."""
        if self.timed_out:
            return "timeout"
        if self.output_truncated:
            return "output_limit"
        if self.exit_code is not None and self.exit_code < 0:
            return "killed"
        return "ok" if self.exit_code == 0 else f"exit {self.exit_code}"


class Sandbox(Protocol):
    """What every backend offers (see `rllm_envs.sandbox.backends` for the table of them)."""

    policy: SandboxPolicy

    def run(self, request: ExecutionRequest) -> ExecutionResult: ...

    def close(self) -> None: ...


def sandbox_env(request: ExecutionRequest, extra_env: Mapping[str, str] = ()) -> dict[str, str]:
    """The whole environment of a sandboxed program: nothing of the host's leaks in."""
    env = {"PATH": SANDBOX_PATH, "HOME": SCRATCH_DIR, "TMPDIR": SCRATCH_DIR, "LANG": "C.UTF-8"}
    env.update(dict(extra_env))
    env.update(request.env)
    return env


@dataclass
class OutputBuffer:
    """Collects stdout and stderr up to a shared byte cap; says when the cap was passed."""

    limit: int
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    truncated: bool = False

    def add(self, stream: str, data: bytes) -> bool:
        """Append `data` to `stream`; False once the cap is exceeded (the caller kills the run)."""
        room = self.limit - len(self.stdout) - len(self.stderr)
        if len(data) > room:
            data, self.truncated = data[: max(room, 0)], True
        getattr(self, stream).extend(data)
        return not self.truncated

    def result(
        self, exit_code: int | None, *, timed_out: bool, wall_seconds: float
    ) -> ExecutionResult:
        return ExecutionResult(
            exit_code=exit_code,
            stdout=self.stdout.decode("utf-8", "replace"),
            stderr=self.stderr.decode("utf-8", "replace"),
            timed_out=timed_out,
            output_truncated=self.truncated,
            wall_seconds=wall_seconds,
        )
