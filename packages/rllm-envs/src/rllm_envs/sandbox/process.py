"""Running one sandbox process from the host: feed its stdin, collect its output under the
policy's byte cap and wall-clock deadline, and kill it when either is passed."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence

from rllm_envs.sandbox.execution import ExecutionResult, OutputBuffer

# Bytes written to the program's stdin per wake-up (a pipe holds 64 KiB by default).
_STDIN_CHUNK = 1 << 16


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _close(stream) -> None:
    try:
        stream.close()
    except OSError:
        pass  # the program exited with unread input in the pipe


def _pump(process: subprocess.Popen, payload: bytes, output: OutputBuffer, deadline: float) -> bool:
    """Feed stdin and drain stdout/stderr from one selector until the program has closed its
    output and taken (or refused) its input, the cap is passed or the deadline comes; True when
    the deadline came first.

    One loop instead of a writer thread: a program that never reads its input cannot block us,
    and no thread is started per run.
    """
    stdin = process.stdin
    pending = memoryview(payload)
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        selector.register(process.stderr, selectors.EVENT_READ, "stderr")
        if pending:
            os.set_blocking(stdin.fileno(), False)
            selector.register(stdin, selectors.EVENT_WRITE, "stdin")
        else:
            _close(stdin)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            for key, _ in selector.select(remaining):
                if key.data == "stdin":
                    try:
                        pending = pending[os.write(key.fd, pending[:_STDIN_CHUNK]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # the program closed its stdin or exited: drop the rest
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(stdin)
                        _close(stdin)
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                elif not output.add(key.data, data):
                    return False
    return False


def run_process(
    argv: Sequence[str],
    payload: bytes,
    *,
    wall_seconds: float,
    max_output_bytes: int,
    pass_fds: Sequence[int] = (),
    user: int | None = None,
) -> ExecutionResult:
    """Run `argv` in its own process group; everything in that group is killed on return."""
    started = time.monotonic()
    deadline = started + wall_seconds
    if user is not None:
        # setpriv rather than Popen(user=...): changing ids in the child stops CPython from
        # using vfork, and forking a trainer with gigabytes resident costs ~100 ms a run.
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=tuple(pass_fds),
        start_new_session=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    output = OutputBuffer(max_output_bytes)
    timed_out = False
    try:
        if user is not None:
            # The pipes are the program's stdin/stdout/stderr: let it reopen them by path
            # (/dev/stdin, /proc/self/fd/0) as programs sometimes do.
            for pipe in (process.stdin, process.stdout, process.stderr):
                os.fchown(pipe.fileno(), user, user)
        timed_out = _pump(process, payload, output, deadline)
        if not timed_out and not output.truncated:
            # Output closed: the program is done, or it closed its streams and runs on.
            try:
                process.wait(max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        kill_group(process)
        process.wait()
        for pipe in (process.stdin, process.stdout, process.stderr):
            _close(pipe)
    stopped_by_us = timed_out or output.truncated
    exit_code = -signal.SIGKILL if stopped_by_us else process.returncode
    return output.result(exit_code, timed_out=timed_out, wall_seconds=time.monotonic() - started)
