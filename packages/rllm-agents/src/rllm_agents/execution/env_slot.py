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

An env whose I/O already runs on an event loop - ``rllm/Web-v0``, ``rllm/MCP-v0`` and
``rllm/SWE-v0`` declare ``metadata["rllm.native_async"] = True`` - is played through its async
methods (``areset`` / ``astep``, :mod:`rllm_envs.core.async_env`, through gym.make's wrappers)
on the event loop: no thread per env, however many run at once. Such an env is made on the
loop's default executor (making may block; it is brief), and closed there.

``calls`` picks the policy per slot: ``"auto"`` (the default: async for native-async envs,
inline for inline-safe ones, a worker thread for the rest), ``"thread"`` (every env on its
worker, never its async methods), ``"inline"`` (everything on the event loop, creation
included) or ``"async"`` (every env through ``areset`` / ``astep``: native where the env has
it, else the env's own fallback - inline for inline-safe envs, otherwise a thread of the loop's
default executor).

Slots that share a :class:`FactoryProbe` (the execution engine gives one to all slots of a run)
also skip the thread for making envs: the first env is made on a worker, since making an env
may block, and when it declares itself inline-safe its siblings from the same factory are made
on the event loop (native-async ones: on the loop's default executor). Starting hundreds of
threads, each waiting for the GIL, otherwise delays every agent's first model call by a good
part of a second.

Slots may also share a :class:`LoopPacer`, which lets one env call run on the loop per pass of
the loop. Without it, when hundreds of agents become ready together (all at the start of a
run, or when a round of model answers arrives at once), the loop runs all their resets and
steps back to back before it looks at a socket again, and every model request of the round
waits for the last agent's env work; paced, each request leaves as soon as its agent is ready.

A slot reuses its env across tasks; after an env error or a timed-out call the env is
abandoned and a fresh one is made. An env still being made when its call is cancelled (a
timed-out episode) is closed once made, never left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rllm_envs.core.async_env import INLINE_SAFE_KEY, areset, astep, async_path, declares

CALL_POLICIES = ("auto", "thread", "inline", "async")
# Where an env is made for each way its calls run: on the event loop, the loop's default
# executor (shared, a few threads: making is brief, and a native env needs no thread after)
# or the slot's own worker, which the env then keeps for life.
MADE_ON: dict[str, str] = {"inline": "loop", "async": "executor", "thread": "worker"}
# Env methods with an awaitable form (rllm_envs.core.async_env: through gym.make's wrappers).
ASYNC_FORMS: dict[str, Callable[..., Awaitable[Any]]] = {"reset": areset, "step": astep}


def check_call_policy(policy: str, argument: str = "calls") -> None:
    """Refuse an unknown policy, naming the argument it came in."""
    if policy not in CALL_POLICIES:
        raise ValueError(f"{argument} must be one of {CALL_POLICIES}, not {policy!r}")


def declares_inline_safe(env: Any) -> bool:
    """Whether the env says its calls are cheap and thread-agnostic (wrappers pass it through)."""
    return declares(env, INLINE_SAFE_KEY)


def call_mode(policy: str, env: Any) -> str:
    """How a slot with `policy` calls `env`: ``"async"`` (areset/astep on the loop),
    ``"inline"`` (the sync methods on the loop) or ``"thread"`` (the slot's worker)."""
    if policy != "auto":
        return policy
    path = async_path(env)
    return "async" if path == "native" else path


@dataclass
class FactoryProbe:
    """How the first env of a factory is called (its :func:`call_mode`), shared by slots.

    ``mode`` is None until that env exists. Use it inside one event loop only.
    """

    mode: str | None = None
    _settled: asyncio.Event | None = field(default=None, init=False, repr=False)

    async def claim(self) -> bool:
        """True: the caller makes the first env and must `settle`; False: the answer is in."""
        while self.mode is None:
            if self._settled is None:
                self._settled = asyncio.Event()
                return True
            await self._settled.wait()
        return False

    def settle(self, mode: str | None) -> None:
        """Record the first env's mode; None (making it failed) lets another slot try."""
        self.mode = mode
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
        self._mode: str | None = None
        # Closes of discarded async envs and of envs made for cancelled calls, on the loop's
        # executor: aclose waits for them.
        self._closing: set[asyncio.Future] = set()

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``env.<method>(*args, **kwargs)`` where the slot's policy says (made on first use)."""
        if self._env is None:
            await self._make_env()
        if self._mode == "thread":
            bound = functools.partial(getattr(self._env, method), *args, **kwargs)
            return await self._on_worker(bound)
        await self._pace()
        if self._mode == "inline":
            return getattr(self._env, method)(*args, **kwargs)
        async_form = ASYNC_FORMS.get(method)
        if async_form is not None:
            return await async_form(self._env, *args, **kwargs)
        bound = functools.partial(getattr(self._env, method), *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, bound)

    async def _make_env(self) -> None:
        made_on = await self._made_on()
        if made_on == "probe":
            probe = self._probe
            assert probe is not None
            try:
                await self._make_on_worker()
            finally:
                probe.settle(self._mode if self._env is not None else None)
            return
        if made_on == "loop":
            await self._pace()
            self._adopt(self._env_factory())
        elif made_on == "executor":
            await self._make_in(None)
        if made_on != "worker" and self._mode == "thread":
            # Unlike its first sibling, this env needs a thread of its own: made again there,
            # so that it never changes threads.
            _close_quietly(self._env)
            self._env = self._mode = None
            made_on = "worker"
        if made_on == "worker":
            await self._make_on_worker()

    async def _made_on(self) -> str:
        """Where the next env is made: a MADE_ON place, or "probe" (first of its factory: on
        the worker, since making may block, and its mode settles where its siblings go)."""
        if self._policy != "auto":
            return MADE_ON[self._policy]
        probe = self._probe
        if probe is None:
            return "worker"
        if await probe.claim():
            return "probe"
        assert probe.mode is not None
        return MADE_ON[probe.mode]

    async def _pace(self) -> None:
        if self._pacer is not None:
            await self._pacer.turn()

    async def _on_worker(self, function: Callable[[], Any]) -> Any:
        await self._start_worker()
        return await asyncio.get_running_loop().run_in_executor(self._executor, function)

    async def _start_worker(self) -> None:
        if not self._thread_running:
            # ThreadPoolExecutor starts its thread inside submit() and waits until that thread
            # holds the GIL. With hundreds of slots starting together that wait, taken on the
            # event loop, stalls every agent for seconds; a helper thread pays it instead.
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._executor.submit, _nothing)
            self._thread_running = True

    async def _make_on_worker(self) -> None:
        await self._start_worker()
        await self._make_in(self._executor)

    async def _make_in(self, executor: ThreadPoolExecutor | None) -> None:
        """Make an env on `executor` (None: the loop's default one) and take it. An env still
        being made when the call is cancelled (a timed-out episode) is closed once made."""
        making = asyncio.get_running_loop().run_in_executor(executor, self._env_factory)
        try:
            env = await asyncio.shield(making)
        except asyncio.CancelledError:
            self._closing.add(making)
            making.add_done_callback(self._close_unwanted)
            raise
        self._adopt(env)

    def _adopt(self, env: Any) -> None:
        self._env, self._mode = env, call_mode(self._policy, env)

    def _close_unwanted(self, making: asyncio.Future) -> None:
        self._closing.discard(making)
        if not making.cancelled() and making.exception() is None:
            self._close_in_background(making.result())

    def _close_in_background(self, env: Any) -> None:
        closing = asyncio.get_running_loop().run_in_executor(None, _close_quietly, env)
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    @property
    def env(self) -> Any:
        """The slot's current env (None before the first call and after a discard)."""
        return self._env

    @property
    def mode(self) -> str | None:
        """How the current env is called (:func:`call_mode`), None without one."""
        return self._mode

    def discard(self) -> None:
        """Drop the env (closed once any stuck call returns) and start afresh.

        Never waits: a call that hangs in the env must not hang the run. An async env's call
        was cancelled with the episode, so it is closed at once, on the loop's executor.
        """
        old_executor, old_env, old_mode = self._executor, self._env, self._mode
        self._env = self._mode = None
        self._executor, self._thread_running = self._new_executor(), False
        if old_env is not None and old_mode == "inline":
            _close_quietly(old_env)  # an inline env has no call in flight anywhere
        elif old_env is not None and old_mode == "async":
            self._close_in_background(old_env)
        elif old_env is not None:
            old_executor.submit(_close_quietly, old_env)
        old_executor.shutdown(wait=False)

    async def aclose(self) -> None:
        """Close the env (where its calls ran; an async env's on the loop's executor) and stop
        the thread; wait for the closes of discarded async envs and of envs made for cancelled
        calls."""
        if self._env is not None:
            env, mode = self._env, self._mode
            self._env = self._mode = None
            loop = asyncio.get_running_loop()
            if mode == "inline":
                _close_quietly(env)
            else:
                executor = self._executor if mode == "thread" else None
                with contextlib.suppress(Exception):
                    await loop.run_in_executor(executor, _close_quietly, env)
        while self._closing:  # an env still being made is closed once made: wait for both
            await asyncio.gather(*self._closing, return_exceptions=True)
        self._executor.shutdown(wait=False)

    def _new_executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)


def _nothing() -> None:
    """Submitted once to make the executor start its thread."""


def _close_quietly(env: Any) -> None:
    # Closing is cleanup on the way out; a failing close must not mask the episode's result.
    with contextlib.suppress(Exception):
        env.close()
