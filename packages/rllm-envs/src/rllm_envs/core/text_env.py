"""`TextEnv`: the base of every single-agent rllm environment.

It holds the contract every env shares so each env only writes its own rules:

* spaces are :class:`~rllm_envs.core.spaces.UnicodeText` (observation bounded, action generous);
* ``reset(seed, options)`` takes the task from ``options["task"]`` or draws one from the bound
  :class:`~rllm_envs.core.tasks.TaskSet` with ``self.np_random``;
* ``step(action)`` accepts whatever a policy produced (str, bytes, numbers, None) and never
  raises on malformed text: subclasses report it as an invalid action;
* an :class:`~rllm_envs.core.failures.InfrastructureFailure` ends the episode (truncated) with
  ``info["failure"]`` set, so trainers can drop it instead of learning from a fake zero;
* observations are clipped to the observation space and infos are fresh copies every call.
* ``areset`` / ``astep`` give the same results awaited (:mod:`rllm_envs.core.async_env`).

Subclasses implement :meth:`begin` (start an episode on a task) and :meth:`act` (one turn),
and, to support ``snapshot()`` / ``restore()`` / ``fork()``, the hooks of
:class:`~rllm_envs.core.snapshots.Snapshottable`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym

from rllm_envs.core import spaces
from rllm_envs.core.async_env import AsyncTextEnv
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.snapshots import Snapshottable
from rllm_envs.core.spaces import action_text
from rllm_envs.core.tasks import Row, TaskSet, task_id


@dataclass
class Transition:
    """What one turn of a text env produced."""

    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def invalid(cls, observation: str, format_penalty: float = 0.0) -> Transition:
        """A turn whose action could not be used: nothing changed, the agent is told why."""
        return cls(
            observation,
            reward=-format_penalty if format_penalty else 0.0,
            info={"action_valid": False},
        )


def fresh_info(info: dict[str, Any]) -> dict[str, Any]:
    """A copy of `info` the caller may mutate without touching the env's state.

    Containers are copied recursively; everything else is shared. A full ``deepcopy`` of every
    info costs more than a FrozenLake step itself, and the scalars, strings and tuples infos hold
    are immutable anyway.
    """
    return {key: _fresh_value(value) for key, value in info.items()}


def _fresh_value(value: Any) -> Any:
    if isinstance(value, dict):
        return fresh_info(value)
    if isinstance(value, (list, set)):
        return type(value)(_fresh_value(item) for item in value)
    if isinstance(value, (str, int, float, bool, tuple, bytes, type(None))):
        return value
    return copy.deepcopy(value)  # e.g. numpy arrays: mutable, copied whole


class TextEnv(Snapshottable, AsyncTextEnv, gym.Env[str, str]):
    """Base class of rllm's text environments (see the module docstring for the contract)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        tasks: TaskSet,
        *,
        max_turns: int | None = None,
        render_mode: str | None = None,
        max_observation_chars: int = spaces.DEFAULT_OBSERVATION_CHARS,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.tasks = tasks
        self.max_turns = max_turns
        self.render_mode = render_mode
        self.observation_space = spaces.observation_space(max_observation_chars)
        self.action_space = spaces.action_space()
        self.task: Row | None = None
        self.turn = 0
        self.episode_over = True
        self.failure_kind: str | None = None
        self.last_observation = ""

    # -- what subclasses write -------------------------------------------------------------
    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        """Start an episode on `task`; return the first observation and info."""
        raise NotImplementedError

    def act(self, action: str) -> Transition:
        """Apply one action (already text) to the running episode."""
        raise NotImplementedError

    def task_name(self) -> str:
        """Prefix of derived task ids (the env's short name)."""
        return type(self).__name__.removesuffix("Env").lower()

    # -- the Gymnasium API -----------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        task = self._open_episode(seed, options)
        try:
            observation, info = self.begin(task)
        except InfrastructureFailure as failure:
            return self._failed_reset(failure)
        return self._reset_result(observation, info)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        refused = self._refused_step()
        if refused is not None:
            return refused
        self.turn += 1
        try:
            result = self.act(action_text(action))
        except InfrastructureFailure as failure:
            result = self._failed_turn(failure)
        return self._step_result(result)

    def render(self) -> str | None:
        return self.last_observation if self.render_mode == "ansi" else None

    # -- helpers ---------------------------------------------------------------------------
    # reset and step in phases, shared with areset and astep (rllm_envs.core.async_env), which
    # differ only in how they wait for begin and act.
    def _open_episode(self, seed: int | None, options: dict[str, Any] | None) -> Row:
        super().reset(seed=seed)
        options = options or {}
        task = options.get("task")
        if task is None:
            task = self.tasks.draw(self.np_random)
        elif not isinstance(task, dict):
            raise TypeError(f"options['task'] must be a dict row, got {type(task).__name__}")
        self.task = dict(task)
        self.turn = 0
        self.episode_over = False
        self.failure_kind = None
        return self.task

    def _failed_reset(self, failure: InfrastructureFailure) -> tuple[str, dict[str, Any]]:
        # reset cannot end an episode, so the first step will: the agent is told, and the
        # info carries the failure for trainers that check it straight away.
        self.episode_over = True
        self.failure_kind = failure.kind
        return self._reset_result(self._failure_text(failure), {"failure": failure.kind})

    def _reset_result(self, observation: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        assert self.task is not None
        info = {"task_id": task_id(self.task, self.task_name()), **info}
        return self._emit(observation), fresh_info(info)

    def _refused_step(self) -> tuple[str, float, bool, bool, dict[str, Any]] | None:
        """The answer to a step that cannot be played (no episode running), else None."""
        if self.task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if not self.episode_over:
            return None
        info = {"task_id": task_id(self.task, self.task_name()), "action_valid": False}
        if self.failure_kind:
            info["failure"] = self.failure_kind
        message = "The episode has ended; call reset() to start a new one."
        return self._emit(message), 0.0, False, True, info

    def _failed_turn(self, failure: InfrastructureFailure) -> Transition:
        self.failure_kind = failure.kind
        return Transition(
            self._failure_text(failure), truncated=True, info={"failure": failure.kind}
        )

    def _step_result(self, result: Transition) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        if self.max_turns is not None and self.turn >= self.max_turns and not result.terminated:
            result.truncated = True
        self.episode_over = result.terminated or result.truncated
        info = {
            "task_id": task_id(self.task, self.task_name()),
            "turn": self.turn,
            "action_valid": True,
            **result.info,
        }
        return (
            self._emit(result.observation),
            float(result.reward),
            bool(result.terminated),
            bool(result.truncated),
            fresh_info(info),
        )

    def _emit(self, observation: str) -> str:
        self.last_observation = spaces.fit_observation(observation, self.observation_space)
        return self.last_observation

    @staticmethod
    def _failure_text(failure: InfrastructureFailure) -> str:
        return (
            f"[environment failure: {failure.kind}] {failure} "
            "This is not your fault; the episode has ended."
        )
