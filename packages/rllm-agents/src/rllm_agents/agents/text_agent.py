"""`TextAgent`: the generic agent for any text env (``rllm/GymText-v0`` included).

The conversation is the env's observations as user messages and the model's replies as
assistant messages; the model's whole reply is the action (text envs parse it themselves).
Subclasses change the system prompt, how an observation is written (:meth:`format_observation`)
and how a reply becomes an action (:meth:`parse_action`).
"""

from __future__ import annotations

import re
from typing import Any

from rllm_agents.agents.base import BaseAgent
from rllm_agents.types import Action, Step, Trajectory

THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent acting in a text environment. Read each observation and reply with your "
    "next action in the format the environment asks for."
)


def drop_thinking(text: str) -> str:
    """`text` without its ``<think>...</think>`` blocks."""
    return THINK_BLOCK.sub("", text).strip()


class TextAgent(BaseAgent):
    """Observations in, the model's reply out as the action (see the module docstring).

    Args:
        system_prompt: the system message (None for no system message).
        keep_thinking: keep ``<think>`` blocks of earlier replies in the history. Dropping them
            saves context; the token-level renderer then starts a new training segment,
            because the model's later prompts no longer contain what it generated.
        max_history_turns: keep only the last N (observation, reply) pairs in the prompt
            (None keeps all).
    """

    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT

    def __init__(
        self,
        system_prompt: str | None = None,
        *,
        keep_thinking: bool = True,
        max_history_turns: int | None = None,
    ) -> None:
        if system_prompt is not None:
            self.system_prompt = system_prompt
        self.keep_thinking = keep_thinking
        self.max_history_turns = max_history_turns
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory(name=type(self).__name__)
        self._messages: list[dict[str, Any]] = []
        self._pending_observation: Any = None
        self._tools: list[dict[str, Any]] | None = None

    # ---- hooks for subclasses -------------------------------------------------------------
    def format_observation(self, observation: Any, info: dict[str, Any]) -> str:
        """The user message for an observation."""
        if isinstance(observation, dict):  # multimodal Dict spaces carry their text under "text"
            observation = observation.get("text", observation)
        return str(observation)

    def parse_action(self, response: str) -> Any:
        """The env action for the model's reply (the whole reply; text envs parse it)."""
        return response

    # ---- BaseAgent ------------------------------------------------------------------------
    def update_from_env(
        self, observation: Any, reward: float, done: bool, info: dict[str, Any], **kwargs: Any
    ) -> None:
        if self._trajectory.steps:
            last = self._trajectory.steps[-1]
            last.reward = float(reward)
            last.done = bool(done)
            last.info = dict(info)
            self._trajectory.reward += float(reward)
        if "tools" in info:
            self._tools = info["tools"]
        if done:
            return
        self._pending_observation = observation
        self._messages.append(
            {"role": "user", "content": self.format_observation(observation, info)}
        )

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        content = response if self.keep_thinking else drop_thinking(response)
        self._messages.append({"role": "assistant", "content": content})
        action = self.parse_action(response)
        self._trajectory.steps.append(
            Step(
                observation=self._pending_observation,
                model_response=response,
                action=action,
                chat_completions=[dict(message) for message in self.chat_completions],
                thought=_thinking(response),
            )
        )
        return Action(action)

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        history = self._messages
        if self.max_history_turns is not None:
            history = _last_turns(history, self.max_history_turns)
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + history

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self._tools


def _thinking(response: str) -> str:
    match = re.search(r"<think>(.*?)</think>", response, re.DOTALL)
    return match.group(1).strip() if match else ""


def _last_turns(messages: list[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """The suffix of `messages` that starts at the `turns`-th last user message."""
    user_positions = [i for i, message in enumerate(messages) if message["role"] == "user"]
    if len(user_positions) <= turns:
        return messages
    return messages[user_positions[-turns] :]
