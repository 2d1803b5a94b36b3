"""How every multi-agent env here starts an episode: the seed first, then the task."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from gymnasium.utils import seeding


class _DrawsTasks(Protocol):
    np_random: np.random.Generator | None

    def draw_task(self, rng: np.random.Generator) -> dict[str, Any]: ...


def seed_and_task(
    env: _DrawsTasks, seed: int | None, options: dict[str, Any] | None
) -> dict[str, Any]:
    """Reseed ``env.np_random`` when a seed is given (or there is none yet, as Gymnasium
    does), then return the episode's task: ``options["task"]``, or one the env draws with its
    generator, so a seed alone fixes the episode."""
    if seed is not None or env.np_random is None:
        env.np_random, _ = seeding.np_random(seed)
    task = (options or {}).get("task")
    if task is None:
        task = env.draw_task(env.np_random)
    elif not isinstance(task, dict):
        raise TypeError(f"options['task'] must be a dict row, got {type(task).__name__}")
    return dict(task)
