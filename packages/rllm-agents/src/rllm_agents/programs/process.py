"""Running an agent program's command: task on stdin, output read back, its process group ended.

The command starts in a session (and process group) of its own, so everything it starts -
a shell's children, a framework's worker processes - can be signalled together. However the
run ends, nothing of it outlives :func:`run_command`:

* the program exits: whatever it left running in its group is killed at once;
* the time limit passes: the group gets SIGTERM, then SIGKILL after ``grace_s``;
* the caller is cancelled (the episode's task, Ctrl-C): the group gets SIGKILL.

A process that leaves the group (``setsid``, a daemon's double fork) still carries the mark
the command was started with in its environment (``RLLM_PROGRAM_RUN``): each of these ends
also kills every process that carries it.

Only the ends of stdout and stderr are kept (a program may print without end); the result is
the last line of stdout, and stderr is what a failure record shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rllm_agents import reaper

STDOUT_LIMIT = 1 << 20  # the result line lives at the end; a MiB of it is plenty
STDERR_LIMIT = 64 << 10
READ_CHUNK = 1 << 16
RUN_MARK_VARIABLE = "RLLM_PROGRAM_RUN"


@dataclass(frozen=True)
class CommandRun:
    returncode: int | None  # None: killed at the time limit
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's own subprocess protocol, plus a future set the moment the process exits.

    ``Process.wait()`` returns only once the process has exited *and* its pipes have closed
    (Python 3.11), so it would wait on anything the program left running with its stdout;
    this future is what lets the run kill those leftovers.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=READ_CHUNK, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


class _Tail:
    """The last `limit` bytes written to it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit:  # trim in bulk, not on every chunk
            del self.data[: len(self.data) - self.limit]

    def text(self) -> str:
        return bytes(self.data[-self.limit :]).decode(errors="replace")


async def run_command(
    argv: Sequence[str],
    *,
    stdin: str,
    env: Mapping[str, str],
    cwd: str | None = None,
    timeout_s: float | None = None,
    grace_s: float = 2.0,
) -> CommandRun:
    """Run `argv` with `stdin` as its input (see the module docstring); OSError if it cannot
    start at all."""
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    # Every process the program starts inherits this mark, also one that left its process
    # group (setsid): what still carries it once the program is done is killed.
    mark = uuid.uuid4().hex
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitProtocol(loop),
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**env, RUN_MARK_VARIABLE: mark},
        cwd=cwd,
        start_new_session=True,  # its own process group: every descendant is signalled with it
    )
    process = asyncio.subprocess.Process(transport, protocol, loop)
    stdout, stderr = _Tail(STDOUT_LIMIT), _Tail(STDERR_LIMIT)
    io = [
        asyncio.ensure_future(_feed(process.stdin, stdin.encode())),
        asyncio.ensure_future(_drain(process.stdout, stdout)),
        asyncio.ensure_future(_drain(process.stderr, stderr)),
    ]
    finished = timed_out = False
    try:
        try:
            await asyncio.wait_for(asyncio.shield(protocol.exited), timeout_s)
            _signal_group(process.pid, signal.SIGKILL)  # what it left behind in its group
        except asyncio.TimeoutError:
            timed_out = True
            await _end_group(process, protocol.exited, grace_s)
        _kill_marked(mark)  # what left the group (setsid, a double fork) goes too
        # The pipes are closed now - unless a process we cannot see (another user's) holds
        # one: stop reading after the grace period rather than hang.
        await asyncio.wait(io, timeout=grace_s)
        finished = True
    finally:
        if not finished:  # cancelled, or the wait itself failed: nothing may outlive us
            _signal_group(process.pid, signal.SIGKILL)
            # Reaped here, while the loop still runs: a loop that closes first (the run is
            # being torn down) leaves the dead process to a warning on stderr.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(protocol.exited)
        if not finished:
            _kill_marked(mark)
        for task in io:
            task.cancel()
        transport.close()  # the pipes, whatever still holds their other ends
    return CommandRun(
        returncode=None if timed_out else transport.get_returncode(),
        stdout=stdout.text(),
        stderr=stderr.text(),
        seconds=time.perf_counter() - started,
    )


async def _end_group(
    process: asyncio.subprocess.Process, exited: asyncio.Future[None], grace_s: float
) -> None:
    """SIGTERM to the group, SIGKILL to it once `grace_s` has passed (or the leader exited)."""
    _signal_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), grace_s)
    _signal_group(process.pid, signal.SIGKILL)
    await asyncio.shield(exited)


def _kill_marked(mark: str) -> None:
    for pid in reaper.carrying(RUN_MARK_VARIABLE, mark):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _feed(pipe: asyncio.StreamWriter | None, data: bytes) -> None:
    if pipe is None:
        return
    # A program that exits without reading its input is not an error of ours.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.write(data)
        await pipe.drain()
        pipe.close()


async def _drain(pipe: asyncio.StreamReader | None, sink: _Tail) -> None:
    if pipe is None:
        return
    while chunk := await pipe.read(READ_CHUNK):
        sink.add(chunk)
