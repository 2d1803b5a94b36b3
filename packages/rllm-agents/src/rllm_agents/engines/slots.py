"""How many requests an engine serves at once, and the wait for a free serving slot.

A model server that answers one request at a time (llama-cpp-python's) queues the rest at its
door, where each runs down its HTTP timeout before the model has looked at it: at 16 episodes
in parallel most requests time out and are retried, and the run ends in errors. So the engine
holds requests back itself: :class:`ServingSlots` lets at most ``count`` requests through at
once, gives each the index of a free slot (a server process, say) and measures how long it
waited. A request is sent only once it has a slot, so the wait is never part of its
generation timeout; it is reported apart, as ``ModelOutput.queue_time``.

Engines say how many requests they serve at once with a ``serving_slots`` attribute (None or
absent: no known limit); :func:`serving_slots` reads it from any engine.

:data:`QUEUE_CLOCK` lets a caller learn, while a request is still waiting, how long its own
requests have waited so far: the execution engine leaves that time off an episode's
``trajectory_timeout``, since the episode was not slow, the others were ahead of it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass


def serving_slots(engine: object) -> int | None:
    """How many requests `engine` serves at once (None: it does not say, or has no limit)."""
    slots = getattr(engine, "serving_slots", None)
    return slots if isinstance(slots, int) and slots > 0 else None


@dataclass
class QueueClock:
    """Seconds the requests of one caller (an episode) spent waiting for a serving slot."""

    waited_s: float = 0.0
    _waiting_since: float | None = None
    _waiters: int = 0

    def waited(self) -> float:
        """What has been waited so far, the wait still going on included."""
        ongoing = time.perf_counter() - self._waiting_since if self._waiting_since else 0.0
        return self.waited_s + ongoing

    def begin(self) -> None:
        if self._waiters == 0:
            self._waiting_since = time.perf_counter()
        self._waiters += 1

    def end(self) -> None:
        # Overlapping waits of one caller (concurrent requests) count once, as wall time.
        self._waiters -= 1
        if self._waiters == 0 and self._waiting_since is not None:
            self.waited_s += time.perf_counter() - self._waiting_since
            self._waiting_since = None


# The clock of the episode (asyncio task) a request is made from, if it keeps one. A context
# variable, so each task sees its own clock through any engine between it and the slots.
QUEUE_CLOCK: ContextVar[QueueClock | None] = ContextVar("rllm_queue_clock", default=None)


@dataclass(frozen=True)
class SlotLease:
    index: int  # which slot (0 .. count-1) the request holds
    queued_s: float  # seconds it waited for it


class ServingSlots:
    """At most ``count`` requests at once; the rest wait here, first come first served.

    A request may name the slot it prefers (``hold(prefer=i)``): the server that answered its
    conversation's last turn still holds that conversation's prompt in its cache, so only the
    new tokens need to be read. It gets that slot when it is free, or when it is the next to be
    freed and this request waits for it; otherwise any free slot, never waiting while one is
    free.
    """

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"serving slots must be at least 1, got {count}")
        self.count = count
        self.in_flight = 0
        self.peak_in_flight = 0
        self._free: list[int] = list(range(count))
        self._waiters: collections.deque[tuple[int | None, asyncio.Future[int]]] = (
            collections.deque()
        )
        self._loop: asyncio.AbstractEventLoop | None = None

    def __getstate__(self) -> dict[str, object]:
        # A copy in another process (a Ray worker's) starts with every slot free on its loop.
        return {**self.__dict__, **self._fresh_state(), "_loop": None}

    def _fresh_state(self) -> dict[str, object]:
        return {"_free": list(range(self.count)), "_waiters": collections.deque(), "in_flight": 0}

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        # Waiters belong to the event loop they wait on; a blocking helper (`run()`) may use
        # the engine from successive loops, each of which starts with every slot free.
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.__dict__.update(self._fresh_state())
            self._loop = loop
        return loop

    async def _acquire(self, prefer: int | None) -> int:
        loop = self._check_loop()
        if self._free and not self._waiters:
            index = prefer if prefer in self._free else self._free[0]
            self._free.remove(index)
            return index
        waiter: asyncio.Future[int] = loop.create_future()
        self._waiters.append((prefer, waiter))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result())  # handed a slot just as it was cancelled
            else:
                self._waiters = collections.deque(w for w in self._waiters if w[1] is not waiter)
            raise

    def _release(self, index: int) -> None:
        live = [entry for entry in self._waiters if not entry[1].done()]
        chosen = next((entry for entry in live if entry[0] == index), live[0] if live else None)
        if chosen is None:
            self._waiters.clear()
            self._free.append(index)
            return
        self._waiters = collections.deque(entry for entry in live if entry is not chosen)
        chosen[1].set_result(index)

    @contextlib.asynccontextmanager
    async def hold(self, prefer: int | None = None) -> AsyncIterator[SlotLease]:
        """Wait for a free slot (`prefer` if it can be had), hold it for the ``async with``
        block, then free it."""
        clock = QUEUE_CLOCK.get()
        started = time.perf_counter()
        if clock is not None:
            clock.begin()
        try:
            index = await self._acquire(prefer)
        finally:
            if clock is not None:
                clock.end()
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield SlotLease(index, time.perf_counter() - started)
        finally:
            self.in_flight -= 1
            self._release(index)
