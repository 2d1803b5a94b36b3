"""`PhasedTextEnv`: a PettingZoo parallel env whose game runs in phases of simultaneous moves.

Each cycle (one ``step``) is a phase: a set of agents acts at once (every solver answers, then
the judge picks; the speaker speaks, then the listener chooses). Agents outside the phase are
live but wait; their actions are ignored, their info says ``to_act: False`` and their
observation says whom they wait for. The subclass writes the rules (:meth:`acting`,
:meth:`resolve`, :meth:`view`); this class does PettingZoo's bookkeeping, text spaces, infos,
``max_cycles`` truncation and infrastructure failures (an
:class:`~rllm_envs.core.failures.InfrastructureFailure` from :meth:`resolve` ends the episode,
truncated, with ``info["failure"]`` set, so trainers can drop it). Every agent ends together.

Its AEC form is PettingZoo's ``parallel_to_aec`` (see :func:`make_versions`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.spaces import action_text
from rllm_envs.multiagent import spaces
from rllm_envs.multiagent.episode_start import seed_and_task


@dataclass
class PhaseResult:
    """What one phase produced: rewards (missing agents get 0), validity of each reply."""

    rewards: dict[str, float] = field(default_factory=dict)
    valid: dict[str, bool] = field(default_factory=dict)
    over: bool = False


class PhasedTextEnv(ParallelEnv):
    """Base class of phased text games (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["ansi"],
        "name": "phased_text",
        "is_parallelizable": True,
        "render_fps": 1,
        "rllm.inline_safe": True,
    }

    def __init__(
        self,
        possible_agents: tuple[str, ...],
        *,
        max_cycles: int | None = None,
        render_mode: str | None = None,
        max_observation_chars: int = spaces.DEFAULT_OBSERVATION_CHARS,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        if max_cycles is not None and max_cycles < 1:
            raise ValueError(f"max_cycles must be at least 1, got {max_cycles}")
        self.possible_agents = list(possible_agents)
        self.agents: list[str] = []
        self.max_cycles = max_cycles
        self.render_mode = render_mode
        self._observation_spaces, self._action_spaces = spaces.per_agent_spaces(
            possible_agents, max_observation_chars
        )
        self.np_random: np.random.Generator | None = None
        self.task: dict[str, Any] = {}
        self.cycle = 0
        self.end_reason: str | None = None
        self.failure: str | None = None
        self._failure_message = ""
        self.replies: dict[str, int] = {}
        self.invalid_moves: dict[str, int] = {}
        self.action_valid: dict[str, bool] = {}

    # -- what subclasses write -------------------------------------------------------------
    def draw_task(self, rng: np.random.Generator) -> dict[str, Any]:
        raise NotImplementedError

    def begin(self, task: dict[str, Any]) -> None:
        """Set up a new episode on `task` (use ``self.np_random`` for any randomness)."""
        raise NotImplementedError

    def acting(self) -> tuple[str, ...]:
        """The agents whose replies this cycle reads."""
        raise NotImplementedError

    def resolve(self, replies: dict[str, str]) -> PhaseResult:
        """Apply the acting agents' replies (text); may raise InfrastructureFailure."""
        raise NotImplementedError

    def view(self, agent: str) -> str:
        """The observation text of `agent` now (its own phase, waiting, or the end)."""
        raise NotImplementedError

    def task_id(self, task: dict[str, Any]) -> str:
        return str(self.metadata["name"])

    def role(self, agent: str) -> str:
        return agent.rsplit("_", 1)[0]

    def extra_info(self, agent: str) -> dict[str, Any]:
        return {}

    def spectator_view(self) -> str:
        """What ``render()`` shows (default: the first agent's view)."""
        return self.view(self.possible_agents[0])

    # -- PettingZoo API --------------------------------------------------------------------
    def observation_space(self, agent: str) -> Any:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self._action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        self.task = seed_and_task(self, seed, options)
        self.agents = list(self.possible_agents)
        self.cycle = 0
        self.end_reason = None
        self.failure = None
        self.replies = dict.fromkeys(self.agents, 0)
        self.invalid_moves = dict.fromkeys(self.agents, 0)
        self.action_valid = dict.fromkeys(self.agents, True)
        self.begin(self.task)
        return self._observations(), self._infos()

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            return {}, {}, {}, {}, {}
        self.cycle += 1
        acting = self.acting()
        replies = {agent: action_text(actions.get(agent)) for agent in acting}
        for agent in acting:
            self.replies[agent] += 1
        try:
            result = self.resolve(replies)
        except InfrastructureFailure as failure:
            self.failure = failure.kind
            self._failure_message = str(failure)
            result = PhaseResult()
        for agent, valid in result.valid.items():
            self.action_valid[agent] = valid
            self.invalid_moves[agent] += 0 if valid else 1
        over = result.over and self.failure is None
        truncated = not over and (
            self.failure is not None
            or (self.max_cycles is not None and self.cycle >= self.max_cycles)
        )
        if over or truncated:
            self.end_reason = "failure" if self.failure else ("finished" if over else "truncated")
        agents = list(self.agents)
        observations = self._observations()
        rewards = {agent: float(result.rewards.get(agent, 0.0)) for agent in agents}
        terminations = dict.fromkeys(agents, over)
        truncations = dict.fromkeys(agents, truncated)
        infos = self._infos()
        if over or truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        if self.render_mode != "ansi" or not self.task:
            return None
        return self.spectator_view()

    def close(self) -> None:
        """Nothing to free by default."""

    # -- helpers ---------------------------------------------------------------------------
    def _observations(self) -> dict[str, dict[str, str]]:
        return {
            agent: spaces.text_observation(self._text(agent), self._observation_spaces[agent])
            for agent in self.agents
        }

    def _text(self, agent: str) -> str:
        if self.failure is not None:
            return (
                f"[environment failure: {self.failure}] {self._failure_message} "
                "This is not your fault; the episode has ended."
            )
        return self.view(agent)

    def _infos(self) -> dict[str, dict[str, Any]]:
        acting = set(self.acting()) if self.end_reason is None else set()
        infos = {}
        for agent in self.agents:
            info: dict[str, Any] = {
                "task_id": self.task_id(self.task),
                "role": self.role(agent),
                "to_act": agent in acting,
                "legal_moves": [],
                "turn": self.cycle,
                "action_valid": self.action_valid[agent],
                "invalid_moves": self.invalid_moves[agent],
            }
            if self.failure is None:
                info.update(self.extra_info(agent))
            else:
                info["failure"] = self.failure
            if self.end_reason is not None:
                info["end_reason"] = self.end_reason
            infos[agent] = info
        return infos


def make_versions(
    parallel_cls: Callable[..., ParallelEnv],
) -> tuple[Callable[..., Any], Callable[..., ParallelEnv]]:
    """PettingZoo's ``env()`` (AEC, through ``parallel_to_aec``) and ``parallel_env()``."""

    def env(**kwargs: Any) -> Any:
        return parallel_to_aec(parallel_cls(**kwargs))

    def parallel_env(**kwargs: Any) -> ParallelEnv:
        return parallel_cls(**kwargs)

    env.__doc__ = f"The AEC form of {parallel_cls.__name__} (agents of a phase act in turn)."
    parallel_env.__doc__ = f"The parallel form of {parallel_cls.__name__} (native)."
    return env, parallel_env
