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
