"""Run a coroutine on the fastest event loop at hand: uvloop's when installed, else asyncio's.

uvloop (libuv under asyncio's API) shortens every socket read, write and callback of the loop,
which is where a rollout of hundreds of agents against one model server spends its own time.
It is optional: without it, or with ``RLLM_UVLOOP=0`` in the environment, asyncio's loop runs
the same code.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

Result = TypeVar("Result")

UVLOOP_SWITCH = "RLLM_UVLOOP"


def uvloop_wanted(use_uvloop: bool | None = None) -> bool:
    """Whether `run` uses uvloop: as asked, else when it is installed and not switched off."""
    if use_uvloop is not None:
        return use_uvloop
    if os.environ.get(UVLOOP_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return importlib.util.find_spec("uvloop") is not None


def run(coroutine: Coroutine[Any, Any, Result], *, use_uvloop: bool | None = None) -> Result:
    """``asyncio.run(coroutine)``, on uvloop's loop where `uvloop_wanted` says so."""
    if uvloop_wanted(use_uvloop):
        import uvloop

        return uvloop.run(coroutine)
    return asyncio.run(coroutine)
