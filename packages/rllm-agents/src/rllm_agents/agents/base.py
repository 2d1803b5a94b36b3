"""`BaseAgent`: turns env observations into chat messages and model text into env actions.

An agent knows nothing about engines or trainers. The execution engine drives it:

1. ``reset()`` at the start of an episode;
2. ``update_from_env(observation, reward, done, info)`` after ``env.reset`` / ``env.step``;
3. the engine sends ``chat_completions`` to the model;
4. ``update_from_model(response)`` returns the :class:`~rllm_agents.types.Action` for the env.

``trajectory`` accumulates one :class:`~rllm_agents.types.Step` per model turn.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from rllm_agents.types import Action, Step, Trajectory


class BaseAgent(ABC):
    """Interface of every agent (see the module docstring for the call order)."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the previous episode."""

    @abstractmethod
    def update_from_env(
        self, observation: Any, reward: float, done: bool, info: dict[str, Any], **kwargs: Any
    ) -> None:
        """Take in what the env returned (from reset: reward 0.0, done False)."""

    @abstractmethod
    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        """Take in the model's response; return the action for the env."""

    @property
    @abstractmethod
    def chat_completions(self) -> list[dict[str, Any]]:
        """The messages to send to the model next (OpenAI chat format)."""

    @property
    @abstractmethod
    def trajectory(self) -> Trajectory:
        """The steps taken so far in this episode."""

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """Tool schemas (OpenAI function format) to render into the chat template, if any."""
        return None

    def get_current_state(self) -> Step | None:
        steps = self.trajectory.steps
        return steps[-1] if steps else None
