"""Running one sandbox process from the host: start it through the launcher, feed its stdin,
collect its output under the policy's byte cap and wall-clock deadline, and kill it when either
is passed."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.sandbox.execution import OutputBuffer

# Bytes written to the program's stdin per wake-up (a pipe holds 64 KiB by default).
_STDIN_CHUNK = 1 << 16
# Marks the launcher's command line, so it can be told apart from the code it starts.
LAUNCHER_MARK = "rllm-sandbox-launcher"


def _launcher_source() -> str:
    return resources.files("rllm_envs.sandbox").joinpath("launcher_program.py").read_text("utf-8")


def _stop(process: subprocess.Popen, channel: socket.socket) -> None:
    channel.close()  # the launcher exits on EOF
    try:
        process.wait(2)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Launcher:
    """The host's end of `launcher_program.py`, started on first use and again whenever it is
    gone (it died, or this process was forked and the launcher belongs to the parent).

    `uid`: the uid it runs as (switched with setpriv, once), or None for the calling user.
    Safe to share between threads: one request at a time, each answered at once.
    """

    python: str
    uid: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _process: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _channel: socket.socket | None = field(default=None, init=False, repr=False)
    _owner_pid: int = field(default=0, init=False, repr=False)
    _finalizer: Callable[[], None] | None = field(default=None, init=False, repr=False)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _start(self) -> None:
        host_end, launcher_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        become = [] if self.uid is None else ["setpriv", f"--reuid={self.uid}",
                                              f"--regid={self.uid}", "--clear-groups"]  # fmt: skip
        argv = [*become, self.python, "-I", "-S", "-c", _launcher_source(),
                str(launcher_end.fileno()), LAUNCHER_MARK]  # fmt: skip
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(launcher_end.fileno(),),
                start_new_session=True,
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
            )
        except OSError as error:
            host_end.close()
            raise InfrastructureFailure(
                "sandbox", f"could not start the sandbox launcher: {error}"
            ) from error
        finally:
            launcher_end.close()
        self._process, self._channel, self._owner_pid = process, host_end, os.getpid()
        # Stopped at close(), garbage collection or interpreter exit, whichever comes first.
        self._finalizer = weakref.finalize(self, _stop, process, host_end)

    def _forget(self) -> None:
        """Drop a launcher that is gone or not ours (after a fork: the parent's; leave it be)."""
        if self._finalizer is not None and self._owner_pid == os.getpid():
            self._finalizer()
        elif self._finalizer is not None:
            self._finalizer.detach()
        self._process = self._channel = self._finalizer = None

    def request(self, message: dict, fds: Sequence[int] = ()) -> tuple[dict, list[int]]:
        data = json.dumps(message).encode()
        with self._lock:
            if self._process is not None and (
                self._owner_pid != os.getpid() or self._process.poll() is not None
            ):
                self._forget()
            if self._channel is None:
                self._start()
            try:
                socket.send_fds(self._channel, [data], list(fds))
                reply, reply_fds, _, _ = socket.recv_fds(
                    self._channel, 1 << 16, 4, socket.MSG_CMSG_CLOEXEC
                )
            except OSError as error:
                reply, reply_fds = b"", []
                failure = error
            else:
                failure = None
            if not reply:
                self._forget()
                raise InfrastructureFailure(
                    "sandbox", f"the sandbox launcher stopped ({failure or 'no reply'})"
                )
        answer = json.loads(reply)
        if "error" in answer:
            for fd in reply_fds:
                os.close(fd)
            raise InfrastructureFailure("sandbox", f"the sandbox launcher: {answer['error']}")
        return answer, reply_fds

    def spawn(self, argv: Sequence[str], fds: Mapping[int, int]) -> Child:
        """Start `argv` in a new session with `fds` (child number -> our fd) and nothing else."""
        message = {"op": "spawn", "argv": list(argv), "env": {"PATH": "/usr/bin:/bin"},
                   "fds": list(fds)}  # fmt: skip
        answer, (pidfd,) = self.request(message, list(fds.values()))
        return Child(answer["pid"], pidfd)

    def set_limits(self, pid: int, rlimits: Mapping[str, int]) -> None:
        self.request({"op": "limit", "pid": pid, "rlimits": dict(rlimits)})

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._forget()


@dataclass
class Child:
    """A process the launcher started (its parent, which reaps it), watched and signalled
    through a pidfd: unlike the pid, that keeps naming this process once it has been reaped."""

    pid: int
    pidfd: int

    def wait(self, timeout: float) -> bool:
        """True once the process has exited; False if `timeout` seconds pass first."""
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        return bool(poller.poll(max(timeout, 0) * 1000))

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already exited

    def close(self) -> None:
        os.close(self.pidfd)


def _close(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


def _pump(
    stdin: int, outputs: Mapping[int, str], payload: bytes, output: OutputBuffer, deadline: float
) -> bool:
    """Feed stdin and drain stdout/stderr from one poller until the program has closed its
    output and taken (or refused) its input, the cap is passed or the deadline comes; True when
    the deadline came first.

    One loop instead of a writer thread: a program that never reads its input cannot block us,
    and no thread is started per run. Closes `stdin` (once written, or on return), so the caller
    must not: a second close could hit a number another thread has opened since.
    """
    pending = memoryview(payload)
    poller = select.poll()
    open_outputs = dict(outputs)
    stdin_open = True
    try:
        for fd in open_outputs:
            poller.register(fd, select.POLLIN)
        if pending:
            os.set_blocking(stdin, False)
            poller.register(stdin, select.POLLOUT)
        else:
            _close(stdin)
            stdin_open = False
        while open_outputs or stdin_open:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            for fd, _ in poller.poll(remaining * 1000):
                if fd == stdin and stdin_open:
                    try:
                        pending = pending[os.write(fd, pending[:_STDIN_CHUNK]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # the program closed its stdin or exited: drop the rest
                        pending = pending[:0]
                    if not pending:
                        poller.unregister(stdin)
                        _close(stdin)
                        stdin_open = False
                    continue
                if fd not in open_outputs:
                    continue
                data = os.read(fd, 65536)
                if not data:
                    poller.unregister(fd)
                    del open_outputs[fd]
                elif not output.add(open_outputs[fd], data):
                    return False
        return False
    finally:
        if stdin_open:
            _close(stdin)


@dataclass
class Finished:
    """How a run ended, before the backend adds its exit code."""

    output: OutputBuffer
    timed_out: bool
    wall_seconds: float

    @property
    def stopped_by_us(self) -> bool:
        return self.timed_out or self.output.truncated


def run_process(
    launcher: Launcher,
    argv: Sequence[str],
    payload: bytes,
    *,
    wall_seconds: float,
    max_output_bytes: int,
    fds: Mapping[int, int] | None = None,
    owner: int | None = None,
    on_start: Callable[[float], None] | None = None,
) -> Finished:
    """Run `argv` (in a session of its own) with `fds` (child number -> our fd) besides its
    standard streams; it is killed on return.

    `owner`: the uid to hand the standard streams' pipes to, so the program may reopen them by
    path (/dev/stdin, /proc/self/fd/0) as programs sometimes do. `on_start(deadline)` is called
    once the process is started, before any I/O with it (the bwrap backend sets the program's
    limits there); what it raises ends the run.
    """
    started = time.monotonic()
    deadline = started + wall_seconds
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    stderr_read, stderr_write = os.pipe()
    ours = (stdin_write, stdout_read, stderr_read)
    try:
        if owner is not None:
            for fd in (stdin_read, stdout_write, stderr_write):
                os.fchown(fd, owner, owner)
        child = launcher.spawn(
            argv, {0: stdin_read, 1: stdout_write, 2: stderr_write, **(fds or {})}
        )
    except BaseException:
        _close(*ours)
        raise
    finally:
        _close(stdin_read, stdout_write, stderr_write)
    output = OutputBuffer(max_output_bytes)
    timed_out = False
    stdin_closed = False
    try:
        if on_start is not None:
            on_start(deadline)
        outputs = {stdout_read: "stdout", stderr_read: "stderr"}
        stdin_closed = True  # _pump closes it whatever happens
        timed_out = _pump(stdin_write, outputs, payload, output, deadline)
        if not timed_out and not output.truncated:
            # Output closed: the program is done, or it closed its streams and runs on.
            timed_out = not child.wait(deadline - time.monotonic())
    finally:
        child.kill()
        child.wait(5)
        child.close()
        _close(stdout_read, stderr_read, *(() if stdin_closed else (stdin_write,)))
    return Finished(output, timed_out, time.monotonic() - started)
