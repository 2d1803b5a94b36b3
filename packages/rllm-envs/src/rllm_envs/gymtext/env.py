"""`GymTextEnv`: any Gymnasium env, observed and steered in text."""

from __future__ import annotations

import copy
import re
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator

from rllm_envs.core.snapshots import SnapshotUnsupported
from rllm_envs.core.tasks import Row, TaskSet, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_envs.gymtext import codecs

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
DEFAULT_ENV_ID = "CartPole-v1"
DEFAULT_TASK_COUNT = 1000
# Without a time limit of the inner env, episodes still end: invalid actions do not advance it.
FALLBACK_MAX_TURNS = 1000


def seed_tasks(env_id: str, count: int) -> TaskSet:
    """The default tasks: the inner env reset with seeds 0..count-1."""
    return TaskSet(
        f"{env_id}-seeds",
        tuple({"task_id": f"{env_id}/seed-{seed}", "seed": seed} for seed in range(count)),
    )


class GymTextEnv(TextEnv):
    """See the package docstring (`rllm_envs.gymtext`) for the full contract."""

    def __init__(
        self,
        env_id: str = DEFAULT_ENV_ID,
        *,
        tasks: Any = None,
        max_turns: int | None = None,
        format_penalty: float = 0.0,
        description: str = "",
        show_ansi: bool = False,
        render_mode: str | None = None,
        **inner_kwargs: Any,
    ) -> None:
        if show_ansi:
            if "ansi" not in render_modes(env_id):
                raise ValueError(f"{env_id} has no 'ansi' render mode to show")
            inner_kwargs["render_mode"] = "ansi"
        # The inner env's checker would warn about our own (correct) usage; ours is checked.
        self.inner = gym.make(env_id, disable_env_checker=True, **inner_kwargs)
        try:
            if not codecs.actable(self.inner.action_space):
                raise ValueError(
                    f"{env_id} acts in {self.inner.action_space}; GymText reads actions of "
                    "Discrete, MultiDiscrete, MultiBinary, Box and Text spaces"
                )
            task_set = (
                seed_tasks(env_id, DEFAULT_TASK_COUNT)
                if tasks is None
                else TaskSources().load(tasks)
            )
            if max_turns is None:
                limit = self.inner.spec.max_episode_steps if self.inner.spec else None
                max_turns = 2 * limit if limit else FALLBACK_MAX_TURNS
            super().__init__(task_set, max_turns=max_turns, render_mode=render_mode)
        except Exception:
            self.inner.close()
            raise
        self.env_id = env_id
        self.format_penalty = float(format_penalty)
        self.description = description
        self.show_ansi = show_ansi
        self.inner_closed = False
        self.inner_observation: Any = None
        self.how_to_act = (
            f"Actions: {codecs.describe(self.inner.action_space)}. Answer with the action alone "
            f"or inside backticks, e.g. `{codecs.example_action(self.inner.action_space)}`."
        )

    def task_name(self) -> str:
        return "gymtext"

    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        seed = task.get("seed")
        if seed is None:
            seed = int(self.np_random.integers(2**31))
        self.inner_observation, inner_info = self.inner.reset(
            seed=int(seed), options=task.get("options")
        )
        lines = [
            *([self.description] if self.description else []),
            f"You are acting in the Gymnasium environment {self.env_id}.",
            f"Observations: {codecs.describe(self.inner.observation_space)}.",
            self.how_to_act,
            "",
            self._observation_text(),
        ]
        return "\n".join(lines), {"inner_info": inner_info}

    def act(self, action: str) -> Transition:
        try:
            inner_action = codecs.parse_action(self.inner.action_space, action)
        except codecs.MessageError as error:
            return Transition.invalid(
                f"Invalid action: {error}. The environment did not advance. {self.how_to_act}\n\n"
                + self._observation_text(),
                self.format_penalty,
            )
        observation, reward, terminated, truncated, inner_info = self.inner.step(inner_action)
        self.inner_observation = observation
        lines = [f"Reward: {codecs.render_array(float(reward))}", self._observation_text()]
        if terminated or truncated:
            lines.append("The episode is over.")
        return Transition(
            "\n".join(lines),
            float(reward),
            bool(terminated),
            bool(truncated),
            info={"action": _plain(inner_action), "inner_info": inner_info},
        )

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    def capture_state(self) -> dict[str, Any]:
        # The inner env - its wrappers, its own np_random and whatever its dynamics hold - is
        # copied whole: Gymnasium envs have no state API, and most are plain Python and numpy.
        if getattr(self.inner, "render_mode", None) == "human":
            raise SnapshotUnsupported(
                f"GymText over {self.env_id} cannot be snapshotted: the inner env renders to a "
                "window (render_mode='human'), which cannot be copied"
            )
        try:
            inner = copy.deepcopy(self.inner)
        except Exception as error:  # noqa: BLE001 - whatever the copy trips on, the answer is no
            raise SnapshotUnsupported(
                f"GymText over {self.env_id} cannot be snapshotted: the inner env holds "
                f"something that cannot be copied ({type(error).__name__}: {error})"
            ) from error
        return {"inner": inner, "observation": copy.deepcopy(self.inner_observation)}

    def restore_state(self, state: dict[str, Any]) -> None:
        inner = copy.deepcopy(state["inner"])  # the snapshot's copy stays as it was
        if not self.inner_closed:
            self.inner.close()
        self.inner, self.inner_closed = inner, False
        self.inner_observation = copy.deepcopy(state["observation"])

    def close(self) -> None:
        if not self.inner_closed:
            self.inner_closed = True
            self.inner.close()
        super().close()

    def _observation_text(self) -> str:
        text = "Observation: " + codecs.render(self.inner.observation_space, self.inner_observation)
        if self.show_ansi:  # the inner env's own text picture, e.g. Taxi's map
            # Terminal colour codes are noise to a language model: drop them.
            text += "\n" + _ANSI_ESCAPE.sub("", str(self.inner.render())).rstrip("\n")
        return text


def render_modes(env_id: str) -> list[str]:
    """The render modes an env id declares, read without making the env."""
    entry_point = gym.spec(env_id).entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    return list(getattr(creator, "metadata", {}).get("render_modes", []))


def _plain(value: Any) -> Any:
    """Actions as JSON-able Python values in `info`."""
    return value.tolist() if isinstance(value, np.ndarray | np.generic) else copy.copy(value)
