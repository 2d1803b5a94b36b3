"""`LoopBridge`: await, from any event loop, coroutines that must run on another loop's thread.

Web's browser host and MCP's server manager keep their I/O on a private loop thread. Their
``astep`` awaits that work from the caller's loop. ``asyncio.run_coroutine_threadsafe`` +
``asyncio.wrap_future`` would do, but each call then wakes the other loop once to start and
once to finish, each wake-up a write to a self-pipe, and each such system call gives up the GIL
and waits to take it back from the other loop's busy thread (up to the 5 ms switch interval).
With hundreds of envs awaiting at once, the caller's loop spent most of its time in those
waits (measured: 2,048 steps of 256 MCP envs, 1.1 s in self-pipe sends and 1.6 s in reads
on the caller's loop, against 0.6 s of its own work). A bridge hands calls over in batches: a
loop is woken once for everything posted to it since its last wake-up, both ways.

Cancelling the awaiting caller cancels the coroutine on the target loop; a ``timeout`` bounds
the wait (``TimeoutError``) and cancels it too.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class _Call:
    coroutine: Coroutine[Any, Any, Any]
    future: asyncio.Future  # on the caller's loop
    task: asyncio.Task | None = None  # on the target loop, once started


@dataclass(eq=False)
class _Outcome:
    call: _Call
    cancelled: bool
    error: BaseException | None = None
    result: Any = None


@dataclass(eq=False)
class _Mailbox:
    """Items for one loop, posted from other threads; the loop is woken once per batch."""

    loop: asyncio.AbstractEventLoop
    deliver: Callable[[list[Any]], None]
    items: list[Any] = field(default_factory=list)
    scheduled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, item: Any) -> None:
        with self.lock:
            self.items.append(item)
            if self.scheduled:
                return
            self.scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop was closed: nobody is waiting there any more
            pass

    def _drain(self) -> None:
        with self.lock:
            items, self.items, self.scheduled = self.items, [], False
        self.deliver(items)


class LoopBridge:
    """Runs coroutines on `loop` (another thread's) for awaiting callers on any other loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._inbox = _Mailbox(loop, self._on_target)
        self._outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    async def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        caller = asyncio.get_running_loop()
        call = _Call(coroutine, caller.create_future())
        self._inbox.post(("start", call))
        timer = caller.call_later(timeout, self._expire, call) if timeout is not None else None
        try:
            return await call.future
        except asyncio.CancelledError:
            self._inbox.post(("cancel", call))
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _expire(self, call: _Call) -> None:
        if not call.future.done():
            call.future.set_exception(TimeoutError())
            self._inbox.post(("cancel", call))

    # -- on the target loop -------------------------------------------------------------------
    def _on_target(self, items: list[tuple[str, _Call]]) -> None:
        loop = asyncio.get_running_loop()
        for kind, call in items:
            if kind == "start":
                call.task = loop.create_task(call.coroutine)
                call.task.add_done_callback(lambda task, call=call: self._finished(call, task))
            elif call.task is not None:  # a cancel always comes after its start
                call.task.cancel()

    def _finished(self, call: _Call, task: asyncio.Task) -> None:
        if task.cancelled():
            outcome = _Outcome(call, cancelled=True)
        else:
            error = task.exception()  # read here, so an unwanted error is not logged as lost
            outcome = _Outcome(call, False, error, None if error else task.result())
        self._outbox(call.future.get_loop()).post(outcome)

    def _outbox(self, loop: asyncio.AbstractEventLoop) -> _Mailbox:
        with self._lock:
            box = self._outboxes.get(loop)
            if box is None:
                box = self._outboxes[loop] = _Mailbox(loop, _settle)
            return box


def _settle(outcomes: list[_Outcome]) -> None:
    """On the caller's loop: hand each outcome to its waiting future (if still waiting)."""
    for outcome in outcomes:
        future = outcome.call.future
        if future.done():
            continue  # the caller gave up (cancelled, or timed out)
        if outcome.cancelled:
            future.cancel()
        elif outcome.error is not None:
            future.set_exception(outcome.error)
        else:
            future.set_result(outcome.result)
