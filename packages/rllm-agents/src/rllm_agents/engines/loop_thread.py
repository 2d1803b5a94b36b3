"""An event loop on a thread of its own, for an engine whose client is tied to one loop.

vLLM's ``AsyncLLM`` starts its output handler on the loop it is first used from and keeps
it there. A caller may use one engine from many loops in turn (a blocking ``run()`` helper
per episode batch, pytest's loop per test, a gateway's loop), so the engine lives on this
thread's loop and each call is handed over to it: ``await thread.run(coroutine)`` works from
any loop (or ``thread.call(coroutine)`` from plain code), and cancelling the awaiting task
cancels the coroutine on the engine's loop too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

Result = TypeVar("Result")


class LoopThread:
    """A daemon thread running one asyncio loop until ``stop``."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    async def run(self, coroutine: Coroutine[Any, Any, Result]) -> Result:
        """Await `coroutine` on this thread's loop, from any other loop."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return await asyncio.wrap_future(future)

    def call(self, coroutine: Coroutine[Any, Any, Result], timeout: float | None = None) -> Result:
        """Run `coroutine` on this thread's loop and wait for it (from a thread without a
        running loop, or one that may block)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop and wait for the thread to end (idempotent)."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
