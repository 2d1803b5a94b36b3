"""`EnvSlot`: one env and where its calls run.

Env calls may block (sandboxes, browsers, graders), so by default they run off the event loop:
each slot owns one worker thread and every call on its env - creation, reset, step, close - runs
there. That keeps envs that are not thread-safe (Playwright's sync API, for one) on the thread
that made them for their whole life, with nothing for the env to declare.

An env whose calls take microseconds (a grid world, a text game) pays more for the thread hop
than for the call: two GIL hand-offs per step, each up to a switch interval (5 ms) while the
event loop is busy, across hundreds of envs. Such an env declares
``metadata["rllm.inline_safe"] = True`` - "my calls never block and may come from any
thread" - and, once made on its worker, is called directly on the event loop.

``calls`` picks the policy per slot: ``"auto"`` (the default: thread, inline once the env
declares itself inline-safe), ``"thread"`` or ``"inline"`` (everything on the event loop,
creation included).

Slots that share a :class:`FactoryProbe` (the execution engine gives one to all slots of a run)
also skip the thread for making envs: the first env is made on a worker, since making an env
may block, and when it declares itself inline-safe its siblings from the same factory are made
on the event loop. Starting hundreds of threads, each waiting for the GIL, otherwise delays
every agent's first model call by a good part of a second.

Slots may also share a :class:`LoopPacer`, which lets one env call run on the loop per pass of
the loop. Without it, when hundreds of agents become ready together (all at the start of a
run, or when a round of model answers arrives at once), the loop runs all their resets and
steps back to back before it looks at a socket again, and every model request of the round
waits for the last agent's env work; paced, each request leaves as soon as its agent is ready.

A slot reuses its env across tasks; after an env error or a timed-out call the env is
abandoned and a fresh one is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

INLINE_SAFE_KEY = "rllm.inline_safe"
CALL_POLICIES = ("auto", "thread", "inline")


def check_call_policy(policy: str, argument: str = "calls") -> None:
    """Refuse an unknown policy, naming the argument it came in."""
    if policy not in CALL_POLICIES:
        raise ValueError(f"{argument} must be one of {CALL_POLICIES}, not {policy!r}")


def declares_inline_safe(env: Any) -> bool:
    """Whether the env says its calls are cheap and thread-agnostic (wrappers pass it through)."""
    return bool((getattr(env, "metadata", None) or {}).get(INLINE_SAFE_KEY, False))


@dataclass
class FactoryProbe:
    """Whether the first env of a factory declared itself inline-safe, shared by slots.

    ``inline_safe`` is None until that env exists. Use it inside one event loop only.
    """

    inline_safe: bool | None = None
    _settled: asyncio.Event | None = field(default=None, init=False, repr=False)

    async def claim(self) -> bool:
        """True: the caller makes the first env and must `settle`; False: the answer is in."""
        while self.inline_safe is None:
            if self._settled is None:
                self._settled = asyncio.Event()
                return True
            await self._settled.wait()
        return False

    def settle(self, inline_safe: bool | None) -> None:
        """Record the first env's declaration; None (making it failed) lets another slot try."""
        self.inline_safe = inline_safe
        settled, self._settled = self._settled, None
        if settled is not None:
            settled.set()


class LoopPacer:
    """At most one paced call per pass of the event loop (see the module docstring)."""

    def __init__(self) -> None:
        self._gate = asyncio.Semaphore(1)

    async def turn(self) -> None:
        await self._gate.acquire()
        # Released on the loop's next pass, after it has polled its sockets once more.
        asyncio.get_running_loop().call_soon(self._gate.release)


class EnvSlot:
    def __init__(
        self,
        env_factory: Callable[[], Any],
        name: str,
        calls: str = "auto",
        probe: FactoryProbe | None = None,
        pacer: LoopPacer | None = None,
    ) -> None:
        check_call_policy(calls)
        self._env_factory = env_factory
        self._name = name
        self._policy = calls
        self._probe = probe
        self._pacer = pacer
        self._executor = self._new_executor()
        self._thread_running = False
        self._env: Any = None
        self._inline = False

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``env.<method>(*args, **kwargs)`` where the slot's policy says (made on first use)."""
        if self._env is None and self._policy == "auto" and self._probe is not None:
            await self._make_first_of_factory(self._probe)
        if self._runs_on_loop():
            await self._pace()  # one turn covers making the env and the call
            if self._env is None:
                self._make()
            if self._inline:
                return getattr(self._env, method)(*args, **kwargs)
            # Unlike its first sibling, this env declares nothing: made again on the worker.
            _close_quietly(self._env)
            self._env = None
        return await self._on_worker(functools.partial(self._call_here, method, *args, **kwargs))

    def _runs_on_loop(self) -> bool:
        if self._policy == "inline":
            return True
        if self._env is not None:
            return self._inline
        probe = self._probe
        return self._policy == "auto" and probe is not None and probe.inline_safe is True

    async def _make_first_of_factory(self, probe: FactoryProbe) -> None:
        """If no sibling has yet, make the factory's first env, on the worker (may block)."""
        if await probe.claim():
            try:
                await self._on_worker(self._make)
            finally:
                probe.settle(self._inline if self._env is not None else None)

    async def _pace(self) -> None:
        if self._pacer is not None:
            await self._pacer.turn()

    async def _on_worker(self, function: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        if not self._thread_running:
            # ThreadPoolExecutor starts its thread inside submit() and waits until that thread
            # holds the GIL. With hundreds of slots starting together that wait, taken on the
            # event loop, stalls every agent for seconds; a helper thread pays it instead.
            await loop.run_in_executor(None, self._executor.submit, _nothing)
            self._thread_running = True
        return await loop.run_in_executor(self._executor, function)

    def _make(self) -> None:
        self._env = self._env_factory()
        self._inline = self._policy == "inline" or (
            self._policy == "auto" and declares_inline_safe(self._env)
        )

    def _call_here(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._env is None:
            self._make()
        return getattr(self._env, method)(*args, **kwargs)

    @property
    def env(self) -> Any:
        """The slot's current env (None before the first call and after a discard)."""
        return self._env

    def discard(self) -> None:
        """Drop the env (closed on its thread once any stuck call returns) and start afresh.

        Never waits: a call that hangs in the env must not hang the run.
        """
        old_executor, old_env, was_inline = self._executor, self._env, self._inline
        self._env, self._inline = None, False
        self._executor, self._thread_running = self._new_executor(), False
        if old_env is not None and was_inline:
            _close_quietly(old_env)  # an inline env has no call in flight anywhere
        elif old_env is not None:
            old_executor.submit(_close_quietly, old_env)
        old_executor.shutdown(wait=False)

    async def aclose(self) -> None:
        """Close the env (on its thread unless it runs inline) and stop the thread."""
        if self._env is not None:
            env, self._env = self._env, None
            if self._inline:
                _close_quietly(env)
            else:
                loop = asyncio.get_running_loop()
                with contextlib.suppress(Exception):
                    await loop.run_in_executor(self._executor, _close_quietly, env)
        self._executor.shutdown(wait=False)

    def _new_executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)


def _nothing() -> None:
    """Submitted once to make the executor start its thread."""


def _close_quietly(env: Any) -> None:
    # Closing is cleanup on the way out; a failing close must not mask the episode's result.
    with contextlib.suppress(Exception):
        env.close()
