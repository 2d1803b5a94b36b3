"""The requests :class:`~rllm_agents.engines.local.LocalEngine`'s worker thread serves: what a
caller hands over, how a decoding row tracks it, how its answer gets back to the caller's event
loop, and the counts of how requests were grouped."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.engines.base import SamplingParams

_STOP_WORKER = object()


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    @property
    def abandoned(self) -> bool:
        # Read from the worker thread: a cancelled future never becomes un-cancelled, so a
        # stale read only delays the drop by one step.
        return self.future.cancelled()


@dataclass(frozen=True)
class _Round:
    """Requests handed over together (``generate_together``): admitted as one group."""

    requests: tuple[_Request, ...]


@dataclass
class BatchStats:
    """How requests were grouped.

    ``batches`` counts prefills (groups of requests admitted together): fewer than
    ``requests`` means requests shared prefills. ``mean_rows_per_pass`` is the mean number of
    sequences per decode step. ``busy_seconds`` is the worker's time spent prefilling,
    decoding and answering (not waiting for requests).
    """

    busy_seconds: float = 0.0
    requests: int = 0
    batches: int = 0
    forward_passes: int = 0
    decode_passes: int = 0
    decoded_rows: int = 0
    generated_tokens: int = 0
    cancelled: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def mean_rows_per_pass(self) -> float:
        return self.decoded_rows / self.decode_passes if self.decode_passes else 0.0


@dataclass
class _RowState:
    """Decoding state of one request inside the running batch."""

    request: _Request
    budget: int
    generator: Any = None
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "length" | "cancelled"
    stop_text_end: int | None = None  # where the text is cut when a stop string matched
    answered: bool = False  # the caller has its result (or gave up)


def _requests_of(item: Any) -> tuple[_Request, ...]:
    """The requests a queue item carries (none for the stop marker)."""
    if isinstance(item, _Round):
        return item.requests
    return () if item is _STOP_WORKER else (item,)


def _resolve(request: _Request, *, result: Any = None, exception: BaseException | None = None):
    def settle() -> None:
        if request.future.done():
            return  # the caller gave up (timeout / cancel)
        if exception is not None:
            request.future.set_exception(exception)
        else:
            request.future.set_result(result)

    try:
        request.loop.call_soon_threadsafe(settle)
    except RuntimeError:
        pass  # the caller's event loop is gone; nobody is waiting for this answer
