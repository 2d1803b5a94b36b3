"""Open-ended web tasks: any URL, a goal in words, and a reward function of the user's.

A row ``{"url": ..., "goal": ..., "reward": "package.module:function"}`` opens `url` and shows
the goal. The episode ends when the agent answers; the reward function, named by an import
string, is then called as ``function(answer=..., page=PageState(...), task=row)`` and returns a
float (or a bool). Without a reward function the episode is unscored (reward 0, no
``is_correct``), which suits evaluation with an outside judge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rllm_envs.core.loading import load_attr


@dataclass(frozen=True)
class PageState:
    """What a reward function sees of the page when the agent answered."""

    url: str
    title: str
    snapshot: str


RewardFunction = Callable[..., float]


def load_reward(spec: str | Callable[..., Any] | None) -> RewardFunction | None:
    """The function named by ``"module:function"`` (or a callable given directly)."""
    if spec is None or callable(spec):
        return spec
    function = load_attr(spec, what="reward function")
    if not callable(function):
        raise ValueError(f"reward function {spec!r} is not callable")
    return function


def check_open_task(task: Mapping[str, Any]) -> None:
    url, goal = task.get("url"), task.get("goal")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"an open-ended web task needs an http(s) 'url', got {url!r}")
    if not isinstance(goal, str) or not goal.strip():
        raise ValueError("an open-ended web task needs a 'goal' (text)")
