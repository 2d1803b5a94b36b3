"""The `bwrap` backend: bubblewrap namespaces + rlimits + a seccomp filter, milliseconds a run.

Each run gets fresh user, pid, network, IPC, UTS and cgroup namespaces; the host's /usr is
mounted read-only (nothing else of the host is visible: no /home, /root, /etc, /work); the only
writable place is a size-capped tmpfs at /scratch. The program runs as the policy's
unprivileged uid with no capabilities. The program is the init of its pid namespace, so when it
exits, or bubblewrap is killed (and takes it along), the kernel kills everything else in the
namespace: a daemon cannot outlive its run.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.sandbox.egress import MOUNT_POINT, EgressProxy
from rllm_envs.sandbox.execution import (
    SCRATCH_DIR,
    ExecutionRequest,
    ExecutionResult,
    sandbox_env,
)
from rllm_envs.sandbox.policy import SandboxPolicy
from rllm_envs.sandbox.process import run_process

# Syscalls untrusted code never needs and that widen the kernel surface it can reach.
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "kexec_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl", "open_by_handle_at",
)  # fmt: skip


class MissingEngineError(RuntimeError):
    """The system part a sandbox backend needs is not installed or not running."""


def seccomp_program() -> bytes | None:
    """A BPF filter refusing DENIED_SYSCALLS with EPERM, or None without libseccomp."""
    try:
        import pyseccomp
    except (ImportError, OSError):
        return None
    syscall_filter = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            syscall_filter.add_rule(pyseccomp.ERRNO(1), name)
        except (ValueError, RuntimeError, OSError):
            continue  # a syscall this architecture does not have
    with tempfile.TemporaryFile() as handle:
        syscall_filter.export_bpf(handle)
        handle.seek(0)
        return handle.read()


# prlimit(1) option of each resource limit; prlimit then execs the program, which inherits them.
_PRLIMIT_OPTIONS = {
    "RLIMIT_CPU": "--cpu",
    "RLIMIT_AS": "--as",
    "RLIMIT_NPROC": "--nproc",
    "RLIMIT_FSIZE": "--fsize",
    "RLIMIT_NOFILE": "--nofile",
    "RLIMIT_CORE": "--core",
}


# The few device nodes programs use, bound from the host (a full --dev costs ~7 ms a run).
_DEVICES = [
    *(arg for node in ("null", "zero", "full", "random", "urandom")
      for arg in ("--dev-bind", f"/dev/{node}", f"/dev/{node}")),
    "--symlink", "/proc/self/fd", "/dev/fd",
    "--symlink", "/proc/self/fd/0", "/dev/stdin",
    "--symlink", "/proc/self/fd/1", "/dev/stdout",
    "--symlink", "/proc/self/fd/2", "/dev/stderr",
]  # fmt: skip


def _file_args(file_fds: Mapping[str, int]) -> list[str]:
    """`--dir`/`--file` arguments that copy each file (from its fd) into the scratch tmpfs."""
    args: list[str] = []
    made: set[str] = set()
    for relative, fd in file_fds.items():
        path = posixpath.normpath(posixpath.join(SCRATCH_DIR, relative))
        if not path.startswith(SCRATCH_DIR + "/"):
            raise ValueError(f"file outside the scratch dir: {relative!r}")
        parent = posixpath.dirname(path)
        while parent != SCRATCH_DIR and parent not in made:
            made.add(parent)
            args[:0] = ["--dir", parent]  # parents before children
            parent = posixpath.dirname(parent)
        args += ["--file", str(fd), path]
    return args


def bwrap_argv(
    policy: SandboxPolicy,
    request: ExecutionRequest,
    *,
    status_fd: int,
    file_fds: Mapping[str, int],
    seccomp_fd: int | None,
    egress: EgressProxy | None = None,
) -> list[str]:
    limits = [f"{_PRLIMIT_OPTIONS[name]}={value}" for name, value in policy.rlimits().items()]
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    extra_env = egress.environment() if egress else {}
    env_pairs = sandbox_env(request, extra_env).items()
    env = [arg for key, value in env_pairs for arg in ("--setenv", key, value)]
    # Limits are set inside the new user namespace: RLIMIT_NPROC set before bubblewrap
    # would count every process of the uid on the host, not just this run's.
    program = ["prlimit", *limits, "--", *request.argv]
    egress_mount = ["--ro-bind", egress.folder, MOUNT_POINT] if egress else []
    return [
        "bwrap",
        "--unshare-all",  # user, pid, network (loopback only), ipc, uts, cgroup
        # The program is the pid namespace's init: no reaper process to start and wake per
        # run, and when it exits the kernel kills whatever it left in the namespace.
        "--as-pid-1",
        "--die-with-parent",
        "--new-session",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/sbin", "/sbin",
        "--proc", "/proc",
        *_DEVICES,
        "--size", str(policy.scratch_mb << 20),
        "--tmpfs", SCRATCH_DIR,
        *_file_args(file_fds),
        *egress_mount,
        "--symlink", SCRATCH_DIR, "/tmp",
        # bubblewrap's root is a writable tmpfs of its own: only /scratch may be written.
        "--remount-ro", "/",
        "--chdir", SCRATCH_DIR,
        "--clearenv",
        *env,
        "--cap-drop", "ALL",
        "--json-status-fd", str(status_fd),
        *seccomp,
        "--",
        *(egress.wrap(program) if egress else program),
    ]  # fmt: skip


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@dataclass
class BwrapSandbox:
    """Runs requests under bubblewrap with `policy`. Nothing carries over between runs."""

    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    python: str = "/usr/bin/python3"

    def __post_init__(self) -> None:
        if any(shutil.which(tool) is None for tool in ("bwrap", "prlimit", "setpriv")):
            raise MissingEngineError(
                "the 'bwrap' sandbox needs bubblewrap: apt-get install bubblewrap"
            )
        if not os.access(self.python, os.X_OK):
            raise MissingEngineError(
                f"the 'bwrap' sandbox runs code with the system Python ({self.python}), "
                "which is missing: apt-get install python3"
            )
        self._seccomp = seccomp_program()
        # The one way out of the sandbox's empty network namespace, when the policy allows any.
        self._egress = EgressProxy(self.policy.network_allowlist) if self.policy.network else None
        # As root the code runs as the policy's uid; otherwise as the calling user, which
        # bubblewrap maps into a user namespace of its own (no privileges either way).
        self._uid = self.policy.uid if os.geteuid() == 0 else None

    @property
    def seccomp(self) -> bool:
        return self._seccomp is not None

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        # Files travel as memfds that bubblewrap copies into the fresh tmpfs; prlimit sets the
        # limits and becomes the program. No long-lived helper runs inside.
        file_fds = {name: _memfd("rllm-file", data) for name, data in request.files.items()}
        seccomp_fd = _memfd("rllm-seccomp", self._seccomp) if self._seccomp else None
        status_read, status_write = os.pipe()
        fds = [status_write, *file_fds.values()] + ([seccomp_fd] if seccomp_fd else [])
        try:
            argv = bwrap_argv(
                self.policy,
                request,
                status_fd=status_write,
                file_fds=file_fds,
                seccomp_fd=seccomp_fd,
                egress=self._egress,
            )
            result = run_process(
                argv,
                request.stdin,
                wall_seconds=self.policy.wall_seconds,
                max_output_bytes=self.policy.max_output_bytes,
                pass_fds=fds,
                user=self._uid,
            )
        finally:
            for fd in fds:
                os.close(fd)
            with os.fdopen(status_read, "rb") as status_stream:
                status = status_stream.read().decode("utf-8", "replace")
        if '"child-pid"' not in status and not result.timed_out:
            raise InfrastructureFailure(
                "sandbox", f"bubblewrap could not start the sandbox: {result.stderr.strip()[:500]}"
            )
        return result

    def close(self) -> None:
        if self._egress is not None:
            self._egress.close()

    def describe(self) -> dict:
        # No cgroup of its own: memory_mb bounds each process, not the run (docs/envs/code.md).
        return {
            "backend": "bwrap",
            "seccomp": self.seccomp,
            **self.policy.describe(),
            "memory_limit": "per_process",
        }
