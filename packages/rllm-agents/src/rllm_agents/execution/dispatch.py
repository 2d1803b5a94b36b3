"""How the model requests of concurrent episodes reach the rollout engine.

Two scheduling modes for :class:`~rllm_agents.execution.AgentExecutionEngine` (``dispatch=``):

* ``"async"`` (the default): each request goes to the engine as soon as its agent asks. The
  engine batches whatever is in flight (the local engine's continuous batching, a server's own
  scheduler), so a fast episode never waits for a slow one.
* ``"lockstep"``: turns are played in rounds. A round starts when every running episode of the
  call has asked for its next turn or ended; its requests go to the engine together, in
  episode order (:meth:`LocalEngine.generate_together
  <rllm_agents.engines.local.LocalEngine.generate_together>` where the engine has it). The
  local engine then runs every round as exactly the same batch whenever the same episodes are
  replayed, whatever the timing of env calls, which makes a rollout's floating-point results
  (and so a training run) reproducible bit for bit. The price: each round waits for the
  slowest env step, and every task of a call runs at once. Time spent waiting for the rest of
  a round is not the episode's own: :func:`wait_for_own_time` leaves it out of the episode's
  ``trajectory_timeout``, so an episode stuck in its env times out alone instead of taking its
  round-mates with it.

What a request samples is fixed separately: with a ``sampling_seed``, the execution engine
gives each request its own seed from (sampling seed, episode index, turn) via
:func:`request_seed`, so the random draws of an episode do not depend on which other requests
share its batch or in which order they arrived. The tokens drawn still can: a batch of another
shape adds floating-point noise to the logits that may tip a draw across a token boundary
(measured on an H100: two async rollouts of the same episodes differed in tokens). Only
lockstep rounds make the whole rollout repeat.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from rllm_agents.engines.base import ModelOutput
from rllm_agents.engines.slots import QUEUE_CLOCK


def request_seed(sampling_seed: int, episode_index: int | str, turn: int | str) -> int:
    """The sampling seed of one model request: a fixed mix of its three coordinates."""
    digest = hashlib.blake2b(
        f"{sampling_seed}/{episode_index}/{turn}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little") >> 1  # a non-negative 63-bit seed


class Dispatch(Protocol):
    """Sends model requests to the engine for one run of the execution engine."""

    def start(self, indices: Iterable[int]) -> None:
        """The episodes of the run (by index) are about to start."""

    async def generate(self, index: int, call: dict[str, Any]) -> ModelOutput:
        """Episode `index`'s request (``engine.generate``'s keyword arguments)."""

    def finish(self, index: int) -> None:
        """Episode `index` asks for nothing more (ended, failed or timed out)."""

    def waited(self, index: int) -> float:
        """Seconds episode `index` has spent waiting for other episodes so far."""


class AsyncDispatch:
    """Every request straight to the engine."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def start(self, indices: Iterable[int]) -> None:
        pass

    async def generate(self, index: int, call: dict[str, Any]) -> ModelOutput:
        return await self.engine.generate(**call)

    def finish(self, index: int) -> None:
        pass

    def waited(self, index: int) -> float:
        return 0.0


class LockstepDispatch:
    """Requests sent in rounds: one per running episode, in episode order (module docstring).

    Lives on one event loop; ``start`` must name every episode before any of them asks.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._running: set[int] = set()
        self._waiting: dict[int, tuple[dict[str, Any], asyncio.Future]] = {}
        self._arrived: dict[int, float] = {}  # when each waiting episode asked (loop time)
        self._waited: dict[int, float] = {}  # seconds of earlier rounds spent waiting
        self._rounds: set[asyncio.Task] = set()  # held so that a round in flight is not dropped

    def start(self, indices: Iterable[int]) -> None:
        self._running.update(indices)

    async def generate(self, index: int, call: dict[str, Any]) -> ModelOutput:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._waiting[index] = (call, future)
        self._arrived[index] = loop.time()
        self._send_if_complete()
        try:
            return await future
        finally:
            waiting = self._waiting.get(index)
            if waiting is not None and waiting[1] is future:  # cancelled before its round left
                self._leave_waiting(index)

    def finish(self, index: int) -> None:
        self._running.discard(index)
        if index in self._waiting:
            self._leave_waiting(index)
        self._send_if_complete()

    def waited(self, index: int) -> float:
        arrived = self._arrived.get(index)
        ongoing = asyncio.get_running_loop().time() - arrived if arrived is not None else 0.0
        return self._waited.get(index, 0.0) + ongoing

    def _leave_waiting(self, index: int) -> tuple[dict[str, Any], asyncio.Future]:
        self._waited[index] = self.waited(index)
        del self._arrived[index]
        return self._waiting.pop(index)

    def _send_if_complete(self) -> None:
        if not self._waiting or len(self._waiting) < len(self._running):
            return
        members = [self._leave_waiting(index) for index in sorted(self._waiting)]
        task = asyncio.get_running_loop().create_task(self._send(members))
        self._rounds.add(task)
        task.add_done_callback(self._rounds.discard)

    async def _send(self, members: list[tuple[dict[str, Any], asyncio.Future]]) -> None:
        # This round's task was made from the context of whichever episode came last; its
        # queue clock is not the round's (setting it here changes this task's context only).
        QUEUE_CLOCK.set(None)
        calls = [call for call, _ in members]
        together = getattr(self.engine, "generate_together", None)
        try:
            if together is not None:
                answers = await together(calls)
            else:
                answers = await asyncio.gather(
                    *(self.engine.generate(**call) for call in calls), return_exceptions=True
                )
        except Exception as exc:  # noqa: BLE001 - the whole round failed: each member hears it
            answers = [exc] * len(members)
        for (_, future), answer in zip(members, answers, strict=True):
            if future.done():
                continue  # its episode gave up (timeout) while the round ran
            if isinstance(answer, asyncio.CancelledError):
                future.cancel()
            elif isinstance(answer, BaseException):
                future.set_exception(answer)
            else:
                future.set_result(answer)


async def wait_for_own_time(
    awaitable: Awaitable[Any], timeout: float | None, waited: Callable[[], float]
) -> Any:
    """``asyncio.wait_for``, with the seconds ``waited()`` reports left off the clock.

    The episode's time waiting for its lockstep round-mates does not count towards its
    timeout; its env calls and its own model time do.
    """
    if timeout is None:
        return await awaitable
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(awaitable)
    started = loop.time()
    try:
        while True:
            remaining = started + timeout + waited() - loop.time()
            if remaining <= 0:
                break
            done, _ = await asyncio.wait({task}, timeout=remaining)
            if done:
                return task.result()
    except asyncio.CancelledError:
        task.cancel()
        raise
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        return task.result()  # it finished just as its time ran out
    raise asyncio.TimeoutError


DISPATCH_MODES: dict[str, type] = {"async": AsyncDispatch, "lockstep": LockstepDispatch}


def check_dispatch(mode: str) -> None:
    if mode not in DISPATCH_MODES:
        raise ValueError(f"dispatch must be one of {tuple(DISPATCH_MODES)}, not {mode!r}")
