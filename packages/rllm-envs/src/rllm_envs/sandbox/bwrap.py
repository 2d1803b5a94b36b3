"""The `bwrap` backend: bubblewrap namespaces + rlimits + a seccomp filter, milliseconds a run.

Each run gets fresh user, pid, network, IPC, UTS and cgroup namespaces; the host's /usr is
mounted read-only (nothing else of the host is visible: no /home, /root, /etc, /work); the only
writable place is a size-capped tmpfs at /scratch. The program runs as the policy's
unprivileged uid with no capabilities. The program is the init of its pid namespace, so when it
exits, or bubblewrap is killed (and takes it along), the kernel kills everything else in the
namespace: a daemon cannot outlive its run. Being init, it ignores signals it sends itself
without a handler (so `abort()` ends in SIGSEGV, -11, where Docker reports SIGABRT, -6).

Runs are started by a long-lived launcher (`launcher_program.py`, one per sandbox) that already
has the uid bubblewrap must start with and sets each run's rlimits from outside: no program
besides the requested one is executed per run (see `_Launch`).

Exit codes are the program's own, or -signal when a signal ended it, as on Docker. Bubblewrap
reports 128 + signal for the latter, the same number as a program exiting 137 on its own, so
the host holds a pidfd of the program (opened while bubblewrap holds it at `--block-fd`) and
reads its real wait status from the kernel once bubblewrap has reaped it (PIDFD_INFO_EXIT,
Linux >= 6.15). On older kernels only bubblewrap's number is known: there 129..192 reads as
killed by signal 1..64, so a program exiting with such a code on its own reads as killed too.
"""

from __future__ import annotations

import fcntl
import json
import os
import posixpath
import select
import shutil
import signal
import struct
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.sandbox import devices
from rllm_envs.sandbox.egress import MOUNT_POINT, EgressProxy
from rllm_envs.sandbox.execution import (
    SCRATCH_DIR,
    ExecutionRequest,
    ExecutionResult,
    sandbox_env,
)
from rllm_envs.sandbox.policy import SandboxPolicy
from rllm_envs.sandbox.process import Launcher, run_process

# Syscalls untrusted code never needs and that widen the kernel surface it can reach.
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "kexec_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl", "open_by_handle_at",
)  # fmt: skip


SYSTEM_PYTHON = "/usr/bin/python3"


class MissingEngineError(RuntimeError):
    """The system part a sandbox backend needs is not installed or not running."""


def check_engine(python: str = SYSTEM_PYTHON) -> None:
    """Raise a :class:`MissingEngineError` naming what to install when this machine lacks a
    part the 'bwrap' backend needs (``rllm-envs doctor`` asks the same)."""
    if shutil.which("bwrap") is None:
        raise MissingEngineError("the 'bwrap' sandbox needs bubblewrap: apt-get install bubblewrap")
    if not os.access(python, os.X_OK):
        raise MissingEngineError(
            f"the 'bwrap' sandbox runs code with the system Python ({python}), "
            "which is missing: apt-get install python3"
        )
    # As root the code runs as the policy's uid, which setpriv switches to.
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        raise MissingEngineError(
            "the 'bwrap' sandbox needs setpriv to run code as the policy's uid when started "
            "by root: apt-get install util-linux"
        )


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
    block_fd: int,
    file_fds: Mapping[str, int],
    seccomp_fd: int | None,
    egress: EgressProxy | None = None,
    bwrap: str = "bwrap",
    device_folder: str | None = None,
) -> list[str]:
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    extra_env = egress.environment() if egress else {}
    env_pairs = sandbox_env(request, extra_env).items()
    env = [arg for key, value in env_pairs for arg in ("--setenv", key, value)]
    program = list(request.argv)
    egress_mount = ["--ro-bind", egress.folder, MOUNT_POINT] if egress else []
    return [
        bwrap,
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
        *devices.bwrap_args(device_folder),
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
        # The namespaces' first process waits here until the launcher has set its limits.
        "--block-fd", str(block_fd),
        *seccomp,
        "--",
        *(egress.wrap(program) if egress else program),
    ]  # fmt: skip


# PIDFD_GET_INFO (linux/pidfd.h) with its first, 64-byte struct pidfd_info, which every kernel
# that has the ioctl accepts; exit_code, a wait status, is its last field.
_PIDFD_INFO_SIZE = 64
_PIDFD_GET_INFO = (3 << 30) | (_PIDFD_INFO_SIZE << 16) | (0xFF << 8) | 11
_PIDFD_INFO_EXIT = 1 << 3
_PIDFD_INFO_EXIT_CODE_AT = 60


def reaped_wait_status(pidfd: int) -> int | None:
    """The wait status of the process behind `pidfd` once its parent has reaped it, read from
    the kernel whoever the parent was; None before then or where the kernel cannot tell
    (Linux < 6.15)."""
    info = bytearray(_PIDFD_INFO_SIZE)
    struct.pack_into("Q", info, 0, _PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, _PIDFD_GET_INFO, info)
    except OSError:
        return None
    if not struct.unpack_from("Q", info)[0] & _PIDFD_INFO_EXIT:
        return None
    return struct.unpack_from("i", info, _PIDFD_INFO_EXIT_CODE_AT)[0]


def program_exit_code(bubblewrap_code: int, wait_status: int | None) -> int:
    """The program's exit code, or -signal when a signal ended it (ExecutionResult's
    convention). Without the kernel's wait status, bubblewrap's 128 + signal is all there is."""
    if wait_status is not None:
        return os.waitstatus_to_exitcode(wait_status)
    if 128 < bubblewrap_code <= 128 + signal.SIGRTMAX:
        return 128 - bubblewrap_code
    return bubblewrap_code


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@dataclass
class BwrapSandbox:
    """Runs requests under bubblewrap with `policy`. Nothing carries over between runs."""

    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    python: str = SYSTEM_PYTHON

    def __post_init__(self) -> None:
        check_engine(self.python)
        self._bwrap = shutil.which("bwrap")
        self._seccomp = seccomp_program()
        # The one way out of the sandbox's empty network namespace, when the policy allows any.
        self._egress = EgressProxy(self.policy.network_allowlist) if self.policy.network else None
        # As root the code runs as the policy's uid; otherwise as the calling user, which
        # bubblewrap maps into a user namespace of its own (no privileges either way). The
        # launcher has that uid already, so bubblewrap starts with it (see launcher_program.py).
        self._uid = self.policy.uid if os.geteuid() == 0 else None
        self._launcher = Launcher(self.python, self._uid)
        self._devices = devices.DeviceFolder()

    @property
    def seccomp(self) -> bool:
        return self._seccomp is not None

    @property
    def device_folder(self) -> str | None:
        """The folder bound as each run's /dev, or None where nodes are bound one by one."""
        return self._devices.path()

    @property
    def launcher_pid(self) -> int | None:
        """The launcher's pid while it runs (it has the sandbox's uid but runs no code)."""
        return self._launcher.pid

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        self.policy.check_files(request.files)
        # Files travel as memfds that bubblewrap copies into the fresh tmpfs. No long-lived
        # helper runs inside, and no program but the requested one.
        launch = _Launch(self._launcher, self.policy.rlimits())
        try:
            files = {
                name: launch.add(_memfd("rllm-file", data)) for name, data in request.files.items()
            }
            seccomp = launch.add(_memfd("rllm-seccomp", self._seccomp)) if self._seccomp else None
            argv = bwrap_argv(
                self.policy,
                request,
                status_fd=_STATUS_FD,
                block_fd=_BLOCK_FD,
                file_fds=files,
                seccomp_fd=seccomp,
                egress=self._egress,
                bwrap=self._bwrap,
                device_folder=self._devices.path(),
            )
            finished = run_process(
                self._launcher,
                argv,
                request.stdin,
                wall_seconds=self.policy.wall_seconds,
                max_output_bytes=self.policy.max_output_bytes,
                fds=launch.fds,
                owner=self._uid,
                on_start=launch.release,
            )
        finally:
            status = launch.finish()
        if "child-pid" not in status and not finished.timed_out:
            raise InfrastructureFailure(
                "sandbox",
                "bubblewrap could not start the sandbox: "
                + finished.output.stderr.decode("utf-8", "replace").strip()[:500],
            )
        stderr = finished.output.stderr
        if finished.stopped_by_us:
            exit_code = -signal.SIGKILL
        elif "exit-code" in status:
            exit_code = program_exit_code(status["exit-code"], launch.program_status)
        elif stderr.startswith(b"bwrap: execvp "):
            # The program could not be executed (bubblewrap reports no exit code then): the
            # request's fault, not the sandbox's; 127 as on Docker and in shells.
            exit_code = 127
        else:
            raise InfrastructureFailure(
                "sandbox",
                "bubblewrap ended without an exit status: "
                + stderr.decode("utf-8", "replace").strip()[:500],
            )
        return finished.output.result(
            exit_code, timed_out=finished.timed_out, wall_seconds=finished.wall_seconds
        )

    def close(self) -> None:
        self._launcher.close()
        self._devices.close()
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


# Where bubblewrap finds the fds of a run (after its standard streams): the status pipe, the
# pipe it waits on, then the files and the seccomp filter.
_STATUS_FD, _BLOCK_FD = 3, 4


@dataclass
class _Launch:
    """The host's side of starting one run. Bubblewrap reports the pid of the namespaces'
    first process on the status pipe and holds it at `--block-fd` until the launcher has set
    that process's rlimits, so the program and all it starts inherit them.

    Set from outside, not by a `prlimit` program run inside (an exec per run); and not before
    bubblewrap starts, where RLIMIT_NPROC would count every process of the uid on the host
    instead of only this run's (the new user namespace keeps its own count).
    """

    launcher: Launcher
    rlimits: dict[str, int]
    fds: dict[int, int] = field(default_factory=dict)  # fd in bubblewrap -> our fd
    status: bytearray = field(default_factory=bytearray)
    # The program's pidfd, opened while it is held (its pid cannot have been reused), and the
    # wait status the kernel reports once bubblewrap has reaped it.
    program_pidfd: int | None = None
    program_status: int | None = None

    def __post_init__(self) -> None:
        self.status_read, status_write = os.pipe()
        block_read, self.block_write = os.pipe()
        self.fds = {_STATUS_FD: status_write, _BLOCK_FD: block_read}

    def add(self, fd: int) -> int:
        """Pass `fd` to bubblewrap; return its number there."""
        number = max(self.fds) + 1
        self.fds[number] = fd
        return number

    def _close_passed(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}

    def release(self, deadline: float) -> None:
        """Wait for the child's pid, have its limits set, let it run (run_process's
        `on_start`)."""
        # Bubblewrap holds its own copies now; ours would keep the status pipe from closing.
        self._close_passed()
        pid = self._child_pid(deadline)
        if pid is None:
            return  # bubblewrap failed (reported by run) or the deadline came: never released
        try:
            self.program_pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            pass  # bubblewrap is already gone (killed); its status says how
        self.launcher.set_limits(pid, self.rlimits)  # raises, leaving it held, if it cannot
        try:
            os.write(self.block_write, b"1")
        except BrokenPipeError:
            pass  # the child is already gone; its status says how

    def _child_pid(self, deadline: float) -> int | None:
        """The pid in bubblewrap's first status line, or None if it ended or time ran out."""
        poller = select.poll()
        poller.register(self.status_read, select.POLLIN)
        while b"\n" not in self.status:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000):
                return None
            chunk = os.read(self.status_read, 4096)
            if not chunk:
                return None
            self.status += chunk
        return json.loads(self.status[: self.status.index(b"\n")]).get("child-pid")

    def finish(self) -> dict:
        """Close the host's ends and return all bubblewrap reported (one JSON object a line,
        merged)."""
        self._close_passed()
        os.close(self.block_write)
        with os.fdopen(self.status_read, "rb") as status_stream:
            self.status += status_stream.read()
        if self.program_pidfd is not None:
            # Bubblewrap has exited by now, so it has reaped the program if the program ended.
            self.program_status = reaped_wait_status(self.program_pidfd)
            os.close(self.program_pidfd)
        merged: dict = {}
        for line in self.status.decode("utf-8", "replace").splitlines():
            try:
                merged.update(json.loads(line))
            except ValueError:
                continue  # cut short when bubblewrap was killed
        return merged
