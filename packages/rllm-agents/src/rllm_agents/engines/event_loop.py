"""Run a coroutine on asyncio's event loop, or on uvloop's where asked for.

uvloop (libuv under asyncio's API) is an opt-in: ``RLLM_UVLOOP=1`` in the environment, or
``use_uvloop=True``, with ``pip install 'rllm-agents[uvloop]'``. It is not the default because
it did not pay for this traffic with aiohttp as the engine's client: in
``benchmarks/engine_throughput.py`` (Python 3.12, an idle machine pinned to 2 cores) 256 agents
ran within half a point of asyncio's loop either way (95.4 % against 94.9 % in one run, 95.1 %
against 95.4 % in another), and ``rllm-eval`` end to end (512 one-turn episodes) was 1-3 points
slower on it (85.8 % against 86.8 %, 84.6 % against 87.5 %). The engine runs on any asyncio
loop.

``all_or_none`` awaits several calls at once and, when one fails, cancels the others before
raising its error, so no call is left running unawaited.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

Result = TypeVar("Result")

UVLOOP_SWITCH = "RLLM_UVLOOP"


def uvloop_wanted(use_uvloop: bool | None = None) -> bool:
    """Whether `run` uses uvloop: as asked, else as ``$RLLM_UVLOOP`` says (default: no)."""
    if use_uvloop is not None:
        return use_uvloop
    return os.environ.get(UVLOOP_SWITCH, "").strip().lower() in ("1", "true", "yes", "on")


def run(coroutine: Coroutine[Any, Any, Result], *, use_uvloop: bool | None = None) -> Result:
    """``asyncio.run(coroutine)``, on uvloop's loop where `uvloop_wanted` says so."""
    if uvloop_wanted(use_uvloop):
        try:
            import uvloop
        except ImportError:
            coroutine.close()
            raise RuntimeError(
                f"{UVLOOP_SWITCH} asks for uvloop, which is not installed: "
                "pip install 'rllm-agents[uvloop]'"
            ) from None
        return uvloop.run(coroutine)
    return asyncio.run(coroutine)


async def all_or_none(calls: Iterable[Awaitable[Result]]) -> list[Result]:
    """Await every call concurrently; if one fails, cancel the rest and raise its error."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
