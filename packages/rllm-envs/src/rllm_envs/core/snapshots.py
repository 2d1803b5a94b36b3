"""Snapshot, restore and fork an env mid-episode.

``snapshot(env)`` captures where an episode stands; ``restore(env, snap)`` puts an env back
there; ``fork(env, n)`` makes ``n`` new envs standing where ``env`` stands. They work through
the Gymnasium wrappers ``gym.make`` adds (``TimeLimit``, ``OrderEnforcing``,
``PassiveEnvChecker``, and any wrapper whose state can be copied), and on the bare env.
Every :class:`~rllm_envs.core.text_env.TextEnv` has them as methods too
(``env.snapshot()``, ``env.restore(snap)``, ``env.fork(n)``, through :class:`Snapshottable`).

The contract
------------
* **What restore guarantees.** After ``restore(env, snap)``, the same actions give the same
  observations, rewards, ``terminated``/``truncated`` flags and infos as they gave after the
  snapshot was taken - randomness included: the env's ``np_random`` state is part of the
  snapshot, so a slippery FrozenLake slips the same way. The env may be the one the snapshot
  came from (played on since) or another env of the same id, kwargs and wrappers (a mismatch
  is a ``ValueError``).
* **A snapshot is a value.** Playing on after a snapshot never changes it, and restoring it
  never consumes it: one snapshot can be restored any number of times, into any number of
  envs, and the restored envs are independent of each other and of the snapshot.
* **Refusal.** An env whose state cannot be captured raises :class:`SnapshotUnsupported` from
  ``snapshot`` (and so from ``fork``), saying which env and why - e.g. an MCP env, whose tool
  servers keep their state outside this process. Nothing is changed by a refusal.
* **Before the first reset.** An env that was never reset can be snapshotted too (restoring
  it gives an env that needs a reset): tools probe whether an env supports snapshots that way
  without starting an episode (rllm-train does, before a tree run claims its folder).
* **Processes.** A snapshot lives in the process that took it. It can be sent to another
  process only when it pickles (FrozenLake's, Math's and Arithmetic's do; a GymText snapshot
  does when its inner env does), and is restored there into an env of the same id and kwargs.
* **Release.** Some snapshots hold something outside Python (a committed container image,
  say). ``release(snap)`` frees it; it is idempotent, and restoring a released snapshot is a
  ``ValueError``. Snapshots of envs that hold nothing outside Python need no release (it is a
  no-op for them). ``fork`` releases the snapshot it takes once every fork is restored.

Writing a snapshottable env
---------------------------
:class:`Snapshottable` captures the base episode fields of a ``TextEnv`` (the task, the turn,
whether the episode is over and why, the last observation, ``max_turns`` and the ``np_random``
state) by itself. A subclass captures only its own state, with three hooks:

* ``capture_state() -> Any``: the subclass's episode state, as a value later steps do not
  change (a copy, not a live reference). The default raises :class:`SnapshotUnsupported`.
* ``restore_state(state) -> None``: make this env stand at ``state``. It runs after the base
  fields are restored (``self.task`` is the snapshot's task). It must not mutate ``state`` or
  keep references to its mutable parts: the same state is restored again and again.
* ``release_state(state) -> None``: a static method (a snapshot may outlive the env it came
  from) freeing what ``state`` holds outside Python; it must be idempotent. Default: nothing.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

# Attributes every Gymnasium wrapper has that describe its place in the stack, not its state:
# a fork built by ``gym.make`` gets its own, and copying them would tie it to the original.
_WRAPPER_STRUCTURE = frozenset(
    {
        "env",
        "_saved_kwargs",
        "_action_space",
        "_observation_space",
        "_metadata",
        "_cached_spec",
        "_reward_range",
    }
)


class SnapshotUnsupported(RuntimeError):
    """The state of this env cannot be captured; the message says which env and why."""


@dataclass(frozen=True)
class EnvSnapshot:
    """Where one episode of one env stands (see the module docstring for the contract).

    ``base`` holds the ``TextEnv``'s own episode fields, ``state`` the subclass's state (opaque:
    only the env class that captured it reads it), ``wrappers`` the state of each Gymnasium
    wrapper around the env, outermost first, keyed ``"<depth>:<WrapperClass>"``.
    """

    env_id: str | None
    base: dict[str, Any]
    state: Any
    wrappers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The class whose hooks read `state` (and release it); checked on restore.
    env_class: type | None = None
    # Whether release() has run, for idempotence (one flag shared by copies in this process).
    released: list[bool] = field(default_factory=lambda: [False], compare=False, repr=False)


class Snapshottable:
    """Adds ``snapshot()``, ``restore(snap)`` and ``fork(n)`` to an env; subclasses write the
    hooks (module docstring). The base fields captured are those named in `snapshot_fields`
    plus the ``np_random`` state."""

    snapshot_fields: ClassVar[tuple[str, ...]] = (
        "task",
        "turn",
        "episode_over",
        "failure_kind",
        "last_observation",
        "max_turns",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hook = cls.__dict__.get("release_state")
        if hook is not None and not isinstance(hook, staticmethod):
            # release(snap) calls it with the state alone, possibly after the env is gone.
            raise TypeError(
                f"{cls.__name__}.release_state must be a @staticmethod taking the state: a "
                "snapshot may be released after its env is closed"
            )

    # -- hooks -----------------------------------------------------------------------------
    def capture_state(self) -> Any:
        """This env's own episode state (beyond the base fields), as a value."""
        raise SnapshotUnsupported(f"{type(self).__name__} does not support snapshots")

    def restore_state(self, state: Any) -> None:
        """Make this env stand at `state` (what :meth:`capture_state` returned)."""
        raise SnapshotUnsupported(f"{type(self).__name__} does not support snapshots")

    @staticmethod
    def release_state(state: Any) -> None:
        """Free what `state` holds outside Python (idempotent). Default: nothing."""

    # -- the public methods ----------------------------------------------------------------
    def snapshot(self) -> EnvSnapshot:
        """Where this env's episode stands (this env alone: no wrappers)."""
        return snapshot(self)

    def restore(self, snap: EnvSnapshot) -> None:
        """Put this env where `snap` was taken (see the module docstring's guarantees)."""
        restore(self, snap)

    def fork(self, n: int) -> list[gym.Env]:
        """`n` new envs like this one (same id and kwargs), each where this one stands now."""
        return fork(self, n)


# -- the module functions ------------------------------------------------------------------------
def snapshot(env: gym.Env) -> EnvSnapshot:
    """Capture `env` (a Snapshottable env, wrapped or not). Raises SnapshotUnsupported."""
    inner = _snapshottable(env)
    state = inner.capture_state()  # first: a refusal leaves nothing half-taken
    return EnvSnapshot(
        env_id=_env_id(env),
        base=_capture_base(inner),
        state=state,
        wrappers=_capture_wrappers(env),
        env_class=type(inner),
    )


def restore(env: gym.Env, snap: EnvSnapshot) -> None:
    """Put `env` where `snap` was taken. `env` must match the snapshot's env: same class, same
    id (when both have one) and the same wrappers."""
    if snap.released[0]:
        raise ValueError("this snapshot was released; take a new one")
    inner = _snapshottable(env)
    if snap.env_class is not None and type(inner) is not snap.env_class:
        raise ValueError(
            f"a snapshot of {snap.env_class.__name__} cannot restore a {type(inner).__name__}"
        )
    env_id = _env_id(env)
    if snap.env_id is not None and env_id is not None and env_id != snap.env_id:
        raise ValueError(f"a snapshot of {snap.env_id} cannot restore an env of {env_id}")
    chain = _wrapper_keys(env)
    if chain != list(snap.wrappers):
        raise ValueError(
            f"the snapshot was taken through the wrappers {list(snap.wrappers) or 'none'}, "
            f"this env has {chain or 'none'}; restore into an env made the same way "
            "(e.g. both by gym.make, or both bare: env.unwrapped)"
        )
    _restore_base(inner, snap.base)
    inner.restore_state(snap.state)
    for wrapper, saved in zip(_wrappers(env), snap.wrappers.values(), strict=True):
        for name, value in saved.items():
            setattr(wrapper, name, copy.deepcopy(value))


def fork(env: gym.Env, n: int) -> list[gym.Env]:
    """`n` new, independent envs made like `env` (its spec: the same id, make kwargs and
    wrappers), each restored to where `env` stands. `env` itself is not changed. The caller
    closes the forks."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"fork needs a positive number of envs, got {n!r}")
    spec = env.spec
    if spec is None:
        raise ValueError(
            f"fork makes new envs from the env's spec, and this {type(env.unwrapped).__name__} "
            "has none: make it with gym.make (the spec records its id and kwargs), or make the "
            "new envs yourself and restore(new_env, snapshot(env)) into each"
        )
    snap = snapshot(env)
    forks: list[gym.Env] = []
    try:
        for _ in range(n):
            forks.append(gym.make(spec))
            restore(forks[-1], snap)
    except BaseException:
        for made in forks:
            made.close()
        raise
    finally:
        release(snap)
    return forks


def release(snap: EnvSnapshot) -> None:
    """Free what `snap` holds outside Python (idempotent; nothing for most envs)."""
    if snap.released[0]:
        return
    if snap.env_class is not None:
        snap.env_class.release_state(snap.state)
    snap.released[0] = True


# -- helpers -----------------------------------------------------------------------------------
def _snapshottable(env: gym.Env) -> Snapshottable:
    inner = env.unwrapped
    if not isinstance(inner, Snapshottable):
        raise SnapshotUnsupported(
            f"{type(inner).__name__} is not an rllm text env: it does not support snapshots "
            "(wrap it in rllm/GymText-v0 to snapshot it)"
        )
    return inner


def _env_id(env: gym.Env) -> str | None:
    spec = env.spec
    return spec.id if spec is not None else None


def _wrappers(env: gym.Env) -> list[gym.Wrapper]:
    found = []
    while isinstance(env, gym.Wrapper):
        found.append(env)
        env = env.env
    return found


def _wrapper_keys(env: gym.Env) -> list[str]:
    return [f"{depth}:{type(wrapper).__name__}" for depth, wrapper in enumerate(_wrappers(env))]


def _capture_wrappers(env: gym.Env) -> dict[str, dict[str, Any]]:
    captured = {}
    for key, wrapper in zip(_wrapper_keys(env), _wrappers(env), strict=True):
        own = {k: v for k, v in vars(wrapper).items() if k not in _WRAPPER_STRUCTURE}
        try:
            captured[key] = copy.deepcopy(own)
        except Exception as error:  # noqa: BLE001 - any copy failure means the same thing
            raise SnapshotUnsupported(
                f"the {type(wrapper).__name__} wrapper around {type(env.unwrapped).__name__} "
                f"holds state that cannot be copied ({type(error).__name__}: {error})"
            ) from error
    return captured


def _capture_base(env: Snapshottable) -> dict[str, Any]:
    base = {name: copy.deepcopy(getattr(env, name)) for name in env.snapshot_fields}
    generator = getattr(env, "_np_random", None)
    base["np_random"] = None if generator is None else generator.bit_generator.state
    base["np_random_seed"] = getattr(env, "_np_random_seed", None)
    return base


def _restore_base(env: Snapshottable, base: dict[str, Any]) -> None:
    for name in env.snapshot_fields:
        setattr(env, name, copy.deepcopy(base[name]))
    env._np_random = _generator(getattr(env, "_np_random", None), base["np_random"])
    env._np_random_seed = base["np_random_seed"]


def _generator(current: np.random.Generator | None, state: dict | None) -> Any:
    """A generator in `state`: `current` itself when it has the same kind of bit generator
    (whoever holds a reference to it sees the restored state), else a new one."""
    if state is None:
        return None
    if current is None or type(current.bit_generator).__name__ != state["bit_generator"]:
        current = np.random.Generator(getattr(np.random, state["bit_generator"])())
    current.bit_generator.state = copy.deepcopy(state)
    return current
