"""Running one sandbox process from the host: feed its stdin, collect its output under the
policy's byte cap and wall-clock deadline, and kill it when either is passed."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

from rllm_envs.sandbox.execution import ExecutionResult, OutputBuffer


def feed_stdin(pipe, payload: bytes) -> threading.Thread:
    """Write `payload` from a thread: a program that never reads its input must not block us."""

    def write() -> None:
        try:
            pipe.write(payload)
        except (BrokenPipeError, OSError, ValueError):
            pass  # the program exited or closed its stdin: what it did not read is dropped
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    thread = threading.Thread(target=write, name="sandbox-stdin", daemon=True)
    thread.start()
    return thread


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
    if user is not None:
        # The pipes are the program's stdin/stdout/stderr: let it reopen them by path
        # (/dev/stdin, /proc/self/fd/0) as programs sometimes do.
        for pipe in (process.stdin, process.stdout, process.stderr):
            os.fchown(pipe.fileno(), user, user)
    writer = feed_stdin(process.stdin, payload)
    output = OutputBuffer(max_output_bytes)
    timed_out = False
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        selector.register(process.stderr, selectors.EVENT_READ, "stderr")
        try:
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for key, _ in selector.select(remaining):
                    data = os.read(key.fd, 65536)
                    if not data:
                        selector.unregister(key.fileobj)
                    elif not output.add(key.data, data):
                        break
                if output.truncated:
                    break
            if not timed_out and not output.truncated:
                # Output closed: the program is done, or it closed its streams and runs on.
                try:
                    process.wait(max(deadline - time.monotonic(), 0))
                except subprocess.TimeoutExpired:
                    timed_out = True
        finally:
            kill_group(process)
            process.wait()
            writer.join(1)
            process.stdout.close()
            process.stderr.close()
    stopped_by_us = timed_out or output.truncated
    exit_code = -signal.SIGKILL if stopped_by_us else process.returncode
    return output.result(exit_code, timed_out=timed_out, wall_seconds=time.monotonic() - started)
