"""`EnvSpec`: an env factory that says which env it makes.

Any zero-argument callable returning an env works as the execution engine's ``env_factory``.
An ``EnvSpec("rllm/Code-v0", {"backend": "docker"})`` is one too, and it also tells an
executor what kind of env it is about to host: the Ray executor routes env kinds to the nodes
that can run them by the id and arguments (:mod:`rllm_agents.execution.ray_executor`). It
pickles as two plain fields, so it travels to other processes without carrying a closure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EnvSpec:
    """``gym.make(id, **kwargs)`` as a factory; ``"pkg.module:ns/Name-vN"`` imports pkg.module."""

    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> Any:
        import gymnasium as gym
        import rllm_envs  # noqa: F401 - registers the rllm/* ids in this process

        return gym.make(self.id, **self.kwargs)


GYMNASIUM_API = "gymnasium"
PARALLEL_API = "pettingzoo.parallel"


@dataclass(frozen=True)
class ParallelEnvSpec:
    """``module.parallel_env(**kwargs)`` as a factory: a PettingZoo env that says what it is,
    so the episodes it plays record it (module path and arguments) and can be replayed."""

    module: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.module

    def __call__(self) -> Any:
        from rllm_envs.core.loading import load_attr

        return load_attr(f"{self.module}:parallel_env", what="multi-agent env")(**self.kwargs)


@dataclass(frozen=True)
class EnvIdentity:
    """Which env a factory makes, as an episode records it (see rllm_agents.types.EnvRecord)."""

    api: str
    id: str | None
    kwargs: dict[str, Any]


def env_identity(env_factory: Any, env: Any = None) -> EnvIdentity:
    """What `env_factory` makes: an EnvSpec or ParallelEnvSpec says so itself; otherwise the
    env's Gymnasium spec (set by ``gym.make``) does, when `env` is given and has one."""
    if isinstance(env_factory, EnvSpec):
        return EnvIdentity(GYMNASIUM_API, env_factory.id, dict(env_factory.kwargs))
    if isinstance(env_factory, ParallelEnvSpec):
        return EnvIdentity(PARALLEL_API, env_factory.module, dict(env_factory.kwargs))
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return EnvIdentity(GYMNASIUM_API, spec.id, dict(spec.kwargs or {}))
    return EnvIdentity(GYMNASIUM_API, None, {})
