"""The async env API: ``await env.areset(...)`` and ``await env.astep(action)``, with exactly
the results of ``reset`` and ``step``, so that one event loop can drive hundreds of envs.

An env answers them in one of three ways (:func:`async_path` says which, through wrappers):

* ``"native"``: the env's I/O already lives on an event loop - Web's browser host, MCP's server
  manager, SWE's container stream - and its async methods await that I/O where its sync ones
  block a thread on it. No thread per env, and no thread per call. Such an env declares
  ``metadata["rllm.native_async"] = True``.
* ``"inline"``: an env that declares ``metadata["rllm.inline_safe"] = True`` (its calls take
  microseconds and never block) is simply called on the caller's loop.
* ``"thread"``: everything else runs its sync call on the loop's default executor
  (``asyncio.to_thread``). That executor bounds how many run at once (``min(32, cpus + 4)``
  threads); give the loop a larger one (``loop.set_default_executor``) to drive many blocking
  envs this way.

:class:`AsyncTextEnv` gives every :class:`~rllm_envs.core.text_env.TextEnv` the two methods;
a subclass goes native by overriding :meth:`AsyncTextEnv.abegin` and
:meth:`AsyncTextEnv.aact`, the async twins of ``begin`` and ``act``. Native envs write their
turn once, as a generator that yields each piece of I/O it needs as an :class:`Io` (the two ways
of doing it): :func:`drive` runs such a turn blocking, :func:`adrive` awaiting.

Gymnasium's wrappers have no async methods, and an attribute lookup does not pass through
them, so call the module functions :func:`areset` / :func:`astep` on whatever ``gym.make``
returned: they go down the wrapper chain keeping each wrapper's rules - ``TimeLimit``'s step
count and truncation, ``OrderEnforcing``'s reset-needed error, ``PassiveEnvChecker``'s checks
of the first reset and step (Gymnasium's own checker functions, run on the results). A wrapper
they do not know (any other, a user's) is not guessed at: from it down, the sync call runs in a
thread, with all its semantics. A plain Gymnasium env runs in a thread too.

A cancelled ``astep`` leaves the env mid-turn (the browser action, the tool call or the command
is cancelled where it can be, and the state is unknown): close the env.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import gymnasium as gym
from gymnasium.utils.passive_env_checker import (
    env_data_reuse_passive_checker,
    env_reset_passive_checker,
    env_step_passive_checker,
)

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.spaces import action_text

NATIVE_ASYNC_KEY = "rllm.native_async"
INLINE_SAFE_KEY = "rllm.inline_safe"
ASYNC_PATHS = ("native", "inline", "thread")

ResetResult = tuple[Any, dict[str, Any]]
StepResult = tuple[Any, Any, bool, bool, dict[str, Any]]
T = TypeVar("T")


def declares(env: Any, key: str) -> bool:
    """Whether the env's metadata sets `key` (Gymnasium's wrappers pass metadata through)."""
    return bool((getattr(env, "metadata", None) or {}).get(key, False))


# -- a turn's I/O, done either way ----------------------------------------------------------
@dataclass(frozen=True)
class Io:
    """One piece of I/O a turn needs: how to do it blocking, and how to await it. Each is a
    callable, so that a coroutine is only made on the path that awaits it."""

    blocking: Callable[[], Any]
    awaiting: Callable[[], Awaitable[Any]]

    @classmethod
    def in_thread(cls, function: Callable[[], Any]) -> Io:
        """I/O with no async form (e.g. a docker SDK call): awaited, it runs in a thread."""
        return cls(function, lambda: asyncio.to_thread(function))


Turn = Generator[Io, Any, T]


def drive(turn: Turn[T]) -> T:
    """Run a turn, blocking on each piece of I/O; what the I/O raised is raised in the turn."""
    try:
        io = next(turn)
        while True:
            try:
                reply = io.blocking()
            except BaseException as error:  # noqa: BLE001 - the turn decides what it catches
                io = turn.throw(error)
            else:
                io = turn.send(reply)
    except StopIteration as done:
        return done.value


async def adrive(turn: Turn[T]) -> T:
    """Run a turn, awaiting each piece of I/O (a cancellation is raised in the turn too)."""
    try:
        io = next(turn)
        while True:
            try:
                reply = await io.awaiting()
            except BaseException as error:  # noqa: BLE001 - the turn decides, as in drive
                io = turn.throw(error)
            else:
                io = turn.send(reply)
    except StopIteration as done:
        return done.value


# -- TextEnv's async methods ----------------------------------------------------------------
class AsyncTextEnv:
    """``areset`` / ``astep`` for :class:`~rllm_envs.core.text_env.TextEnv`: the same
    bookkeeping as ``reset`` / ``step`` around :meth:`abegin` / :meth:`aact`, whose defaults
    call ``begin`` / ``act`` inline (inline-safe envs) or in a thread (the rest)."""

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        task = self._open_episode(seed, options)
        try:
            observation, info = await self.abegin(task)
        except InfrastructureFailure as failure:
            return self._failed_reset(failure)
        return self._reset_result(observation, info)

    async def astep(self, action: Any) -> StepResult:
        refused = self._refused_step()
        if refused is not None:
            return refused
        self.turn += 1
        try:
            result = await self.aact(action_text(action))
        except InfrastructureFailure as failure:
            result = self._failed_turn(failure)
        return self._step_result(result)

    async def abegin(self, task: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``begin``, awaited: native envs override it."""
        return await _blocking(self, self.begin, task)

    async def aact(self, action: str) -> Any:
        """``act``, awaited: native envs override it."""
        return await _blocking(self, self.act, action)


async def _blocking(env: Any, function: Callable[..., T], *args: Any) -> T:
    """A sync call of `env`: inline when the env declares it cheap, else in a thread."""
    if declares(env, INLINE_SAFE_KEY):
        return function(*args)
    return await asyncio.to_thread(function, *args)


# -- any Gymnasium env, through its wrappers ------------------------------------------------
@dataclass(frozen=True)
class WrapperRules:
    """How one Gymnasium wrapper class's reset and step are played asynchronously."""

    areset: Callable[[Any, int | None, dict[str, Any] | None], Awaitable[ResetResult]]
    astep: Callable[[Any, Any], Awaitable[StepResult]]


async def areset(
    env: Any, *, seed: int | None = None, options: dict[str, Any] | None = None
) -> ResetResult:
    """``env.reset(seed=seed, options=options)``, awaited (see the module docstring)."""
    own = getattr(env, "areset", None)
    if own is not None:
        return await own(seed=seed, options=options)
    rules = WRAPPER_RULES.get(type(env))
    if rules is not None:
        return await rules.areset(env, seed, options)
    return await _blocking(env, functools.partial(env.reset, seed=seed, options=options))


async def astep(env: Any, action: Any) -> StepResult:
    """``env.step(action)``, awaited (see the module docstring)."""
    own = getattr(env, "astep", None)
    if own is not None:
        return await own(action)
    rules = WRAPPER_RULES.get(type(env))
    if rules is not None:
        return await rules.astep(env, action)
    return await _blocking(env, env.step, action)


def async_path(env: Any) -> str:
    """How :func:`astep` plays `env`: ``"native"``, ``"inline"`` or ``"thread"`` (the first
    level that has no async form of its own decides; known wrappers are looked through)."""
    while getattr(env, "astep", None) is None and type(env) in WRAPPER_RULES:
        env = env.env
    if getattr(env, "astep", None) is not None and declares(env, NATIVE_ASYNC_KEY):
        return "native"
    return "inline" if declares(env, INLINE_SAFE_KEY) else "thread"


async def _time_limit_reset(env: Any, seed: int | None, options: dict | None) -> ResetResult:
    env._elapsed_steps = 0
    return await areset(env.env, seed=seed, options=options)


async def _time_limit_step(env: Any, action: Any) -> StepResult:
    observation, reward, terminated, truncated, info = await astep(env.env, action)
    env._elapsed_steps += 1
    truncated = truncated or env._elapsed_steps >= env._max_episode_steps
    return observation, reward, terminated, truncated, info


async def _order_reset(env: Any, seed: int | None, options: dict | None) -> ResetResult:
    env._has_reset = True
    return await areset(env.env, seed=seed, options=options)


async def _order_step(env: Any, action: Any) -> StepResult:
    if not env._has_reset:
        raise gym.error.ResetNeeded("Cannot call env.step() before calling env.reset()")
    return await astep(env.env, action)


@dataclass(frozen=True)
class _Answered:
    """Stands for an env whose call was already awaited: Gymnasium's passive checkers make the
    call themselves, then check what came back; this hands them the result."""

    env: Any
    result: Any

    @property
    def observation_space(self) -> Any:
        return self.env.observation_space

    @property
    def reset(self) -> Callable[..., Any]:
        # The checker reads reset's signature (seed and options parameters): the real one's.
        @functools.wraps(self.env.reset)
        def answered(**_: Any) -> Any:
            return self.result

        return answered

    def step(self, _action: Any) -> Any:
        return self.result


async def _checker_reset(env: Any, seed: int | None, options: dict | None) -> ResetResult:
    result = await areset(env.env, seed=seed, options=options)
    if not env.checked_reset:
        env.checked_reset = True
        env._previous_data = env_reset_passive_checker(
            _Answered(env.env, result), seed=seed, options=options
        )
    return result


async def _checker_step(env: Any, action: Any) -> StepResult:
    result = await astep(env.env, action)
    observation, _, _, _, info = result
    if not env.checked_step:
        env.checked_step = True
        env_step_passive_checker(_Answered(env.env, result), action)
        env_data_reuse_passive_checker(env._previous_data, (observation, info), "reset", "step")
        env._previous_data = (observation, info)
    elif not env.checked_data_reuse:
        env_data_reuse_passive_checker(env._previous_data, (observation, info), "step", "step")
        env._previous_data = None
        env.checked_data_reuse = True
    return result


# The wrappers gym.make puts around an env. Exact classes only: a subclass may change step.
WRAPPER_RULES: dict[type, WrapperRules] = {
    gym.wrappers.TimeLimit: WrapperRules(_time_limit_reset, _time_limit_step),
    gym.wrappers.OrderEnforcing: WrapperRules(_order_reset, _order_step),
    gym.wrappers.PassiveEnvChecker: WrapperRules(_checker_reset, _checker_step),
}

__all__ = [
    "ASYNC_PATHS",
    "INLINE_SAFE_KEY",
    "NATIVE_ASYNC_KEY",
    "AsyncTextEnv",
    "Io",
    "Turn",
    "WrapperRules",
    "adrive",
    "areset",
    "astep",
    "async_path",
    "declares",
    "drive",
]
