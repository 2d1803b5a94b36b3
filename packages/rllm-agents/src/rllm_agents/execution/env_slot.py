"""`EnvSlot`: one env and the single thread it lives on.

Env calls block (sandboxes, browsers, graders), so they run off the event loop. Each slot owns
one worker thread and every call on its env - creation, reset, step, close - runs there. That
keeps envs that are not thread-safe (Playwright's sync API, for one) on the thread that made
them for their whole life, with nothing for the env to declare. A slot reuses its env across
tasks; after an env error or a timed-out call the env is abandoned and a fresh one is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class EnvSlot:
    def __init__(self, env_factory: Callable[[], Any], name: str) -> None:
        self._env_factory = env_factory
        self._name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._env: Any = None

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``env.<method>(*args, **kwargs)`` on the slot's thread (the env is made on first use)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(self._call_on_thread, method, *args, **kwargs)
        )

    def _call_on_thread(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._env is None:
            self._env = self._env_factory()
        return getattr(self._env, method)(*args, **kwargs)

    def discard(self) -> None:
        """Drop the env (closed on its thread once any stuck call returns) and start afresh.

        Never waits: a call that hangs in the env must not hang the run.
        """
        old_executor, old_env = self._executor, self._env
        self._env = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        if old_env is not None:
            old_executor.submit(_close_quietly, old_env)
        old_executor.shutdown(wait=False)

    async def aclose(self) -> None:
        """Close the env on its thread and stop the thread."""
        if self._env is not None:
            env, self._env = self._env, None
            loop = asyncio.get_running_loop()
            with contextlib.suppress(Exception):
                await loop.run_in_executor(self._executor, _close_quietly, env)
        self._executor.shutdown(wait=False)


def _close_quietly(env: Any) -> None:
    # Closing is cleanup on the way out; a failing close must not mask the episode's result.
    with contextlib.suppress(Exception):
        env.close()
