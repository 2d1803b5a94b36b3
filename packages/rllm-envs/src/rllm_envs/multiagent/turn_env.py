"""`TurnTextEnv`: a PettingZoo AEC env for turn-based games played in text.

A game (:class:`TurnGame`) holds the rules and the state; this class holds everything the
multi-agent contract adds around it, once for every turn-based game:

* PettingZoo's AEC bookkeeping (agent selection, rewards, cumulative rewards, dead steps);
* text spaces (:mod:`rllm_envs.multiagent.spaces`) and observations that tell each player what
  happened since its last turn, show the game from its side and list its legal moves;
* reading the move out of the reply (:mod:`rllm_envs.multiagent.moves`) and the invalid-move
  rule: a reply that names no legal move is answered with an observation saying why and the
  same player moves again; a player whose invalid replies exceed ``invalid_move_allowance``
  forfeits: the game ends, the offender gets ``forfeit_rewards[0]`` and every other player
  ``forfeit_rewards[1]`` (SPIRAL's -1.5 / +0.5 by default);
* ``max_turns`` (replies, valid or not, of all players together) truncates: a 0/0 draw;
* infos (see :func:`TurnTextEnv.agent_info`) and ``"ansi"`` rendering.

Its parallel form is PettingZoo's ``turn_based_aec_to_parallel`` (see :func:`make_versions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
from pettingzoo import AECEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

from rllm_envs.core.spaces import action_text
from rllm_envs.multiagent import spaces
from rllm_envs.multiagent.episode_start import seed_and_task
from rllm_envs.multiagent.moves import read_move
from rllm_envs.multiagent.outcomes import outcomes_from_returns

DEFAULT_FORFEIT_REWARDS = (-1.5, 0.5)


class TurnGame(Protocol):
    """One game in progress: rules and state, no text parsing and no PettingZoo bookkeeping."""

    def current_player(self) -> str:
        """The player to move."""

    def legal_moves(self) -> list[str]:
        """The current player's legal moves, as the text it may write."""

    def play(self, move: str) -> str:
        """Apply one legal move of the current player; return what the others are told."""

    def is_over(self) -> bool: ...

    def returns(self) -> dict[str, float]:
        """Each player's reward for the finished game (e.g. +1 / -1 / 0)."""

    def view(self, agent: str | None) -> str:
        """The game as `agent` sees it (None: a spectator who sees everything)."""

    def rules(self, agent: str) -> str:
        """What `agent` is told before its first move."""


@dataclass
class _Seat:
    """What the env remembers about one player during a game."""

    news: list[str] = field(default_factory=list)  # what happened since its last reply
    replies: int = 0
    invalid_moves: int = 0
    action_valid: bool = True


class TurnTextEnv(AECEnv):
    """Base class of turn-based text games (see the module docstring).

    Subclasses set ``metadata["name"]`` and ``possible_agents`` and implement
    :meth:`new_game` and :meth:`task_id`; :meth:`draw_task` when a game has random setup.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["ansi"],
        "name": "turn_text",
        # Not by aec_to_parallel, which assumes every agent acts each cycle: the parallel form
        # is turn_based_aec_to_parallel (make_versions).
        "is_parallelizable": False,
        "render_fps": 1,
        "rllm.inline_safe": True,
    }
    move_aliases: ClassVar[Mapping[str, str]] = {}
    aliases_in_prose: ClassVar[bool] = False  # see rllm_envs.multiagent.moves

    def __init__(
        self,
        possible_agents: tuple[str, ...],
        *,
        invalid_move_allowance: int = 1,
        forfeit_rewards: tuple[float, float] = DEFAULT_FORFEIT_REWARDS,
        max_turns: int | None = None,
        render_mode: str | None = None,
        max_observation_chars: int = spaces.DEFAULT_OBSERVATION_CHARS,
    ) -> None:
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        if invalid_move_allowance < 0:
            raise ValueError(f"invalid_move_allowance must be >= 0, got {invalid_move_allowance}")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        if len(forfeit_rewards) != 2:
            raise ValueError("forfeit_rewards is (offender's reward, every other player's)")
        self.possible_agents = list(possible_agents)
        self.agents = list(possible_agents)
        self.invalid_move_allowance = invalid_move_allowance
        self.forfeit_rewards = (float(forfeit_rewards[0]), float(forfeit_rewards[1]))
        self.max_turns = max_turns
        self.render_mode = render_mode
        self._observation_spaces, self._action_spaces = spaces.per_agent_spaces(
            possible_agents, max_observation_chars
        )
        self.np_random: np.random.Generator | None = None
        self.game: TurnGame | None = None
        self.task: dict[str, Any] = {}
        self.turn = 0
        self.end_reason: str | None = None
        self.outcomes: dict[str, str] = {}
        self.seats: dict[str, _Seat] = {}

    # -- what subclasses write -------------------------------------------------------------
    def new_game(self, task: dict[str, Any]) -> TurnGame:
        raise NotImplementedError

    def draw_task(self, rng: np.random.Generator) -> dict[str, Any]:
        """The task of an episode that was given none (games with random setup draw it)."""
        return {}

    def task_id(self, task: dict[str, Any]) -> str:
        return str(self.metadata["name"])

    def role(self, agent: str) -> str:
        """The agent's role for per-role statistics; seats of a turn game differ (who moves
        first), so each is its own role."""
        return agent

    def extra_info(self, agent: str) -> dict[str, Any]:
        """Game-specific info for `agent` (e.g. the board for scripted opponents)."""
        return {}

    # -- PettingZoo API --------------------------------------------------------------------
    def observation_space(self, agent: str) -> Any:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.task = seed_and_task(self, seed, options)
        self.game = self.new_game(self.task)
        self.agents = list(self.possible_agents)
        self.turn = 0
        self.end_reason = None
        self.outcomes: dict[str, str] = {}
        self.seats = {agent: _Seat() for agent in self.agents}
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.agent_selection = self.game.current_player()
        self.infos = {agent: self.agent_info(agent) for agent in self.agents}

    def observe(self, agent: str) -> dict[str, str]:
        return spaces.text_observation(
            self._observation_text(agent), self._observation_spaces[agent]
        )

    def step(self, action: Any) -> None:
        if self.game is None:
            raise RuntimeError("call reset() before step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        self.turn += 1
        seat = self.seats[agent]
        seat.replies += 1
        seat.news = []
        reading = read_move(
            action_text(action),
            self.game.legal_moves(),
            self.move_aliases,
            aliases_in_prose=self.aliases_in_prose,
        )
        seat.action_valid = reading.move is not None
        if reading.move is None:
            self._reject(agent, seat, reading.problem)
        else:
            told = self.game.play(reading.move)
            for other in self.agents:
                if other != agent:
                    self.seats[other].news.append(told)
            if self.game.is_over():
                self._finish(self.game.returns(), "finished")
            else:
                self.agent_selection = self.game.current_player()
        if self.end_reason is None and self.max_turns is not None and self.turn >= self.max_turns:
            self._truncate()
        self.infos = {name: self.agent_info(name) for name in self.agents}
        self._accumulate_rewards()

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.game is None:
            return None
        return self.game.view(None)

    def close(self) -> None:
        """Nothing to free: the game is plain Python state."""

    # -- the rules around every game -------------------------------------------------------
    def _reject(self, agent: str, seat: _Seat, problem: str) -> None:
        seat.invalid_moves += 1
        if seat.invalid_moves > self.invalid_move_allowance:
            offender, others = self.forfeit_rewards
            returns = {name: (offender if name == agent else others) for name in self.agents}
            for name in self.agents:
                news = f"{agent} forfeits: too many invalid moves (last: {problem})."
                self.seats[name].news.append(news)
            self._finish(returns, "forfeit", loser=agent)
            return
        left = self.invalid_move_allowance - seat.invalid_moves + 1
        seat.news.append(
            f"Invalid move: {problem}. Try again ({left} more invalid "
            f"{'reply' if left == 1 else 'replies'} and you forfeit)."
        )

    def _finish(self, returns: dict[str, float], reason: str, loser: str | None = None) -> None:
        self.end_reason = reason
        self.outcomes = outcomes_from_returns(returns, loser=loser)
        for name in self.agents:
            self.rewards[name] = float(returns.get(name, 0.0))
        self.terminations = dict.fromkeys(self.agents, True)
        self._advance_after_end()

    def _truncate(self) -> None:
        self.end_reason = "truncated"
        self.outcomes = dict.fromkeys(self.agents, "draw")
        for name in self.agents:
            self.seats[name].news.append(f"The game was stopped after {self.turn} turns: a draw.")
        self.truncations = dict.fromkeys(self.agents, True)
        self._advance_after_end()

    def _advance_after_end(self) -> None:
        # The player after the last mover is selected first to collect its final reward.
        order = self.agents
        index = order.index(self.agent_selection)
        self.agent_selection = order[(index + 1) % len(order)]

    def agent_info(self, agent: str) -> dict[str, Any]:
        """Every agent's info after every step (the keys the workflow engine reads)."""
        seat = self.seats[agent]
        over = self.end_reason is not None
        to_act = not over and agent == self.agent_selection
        info: dict[str, Any] = {
            "task_id": self.task_id(self.task),
            "role": self.role(agent),
            "to_act": to_act,
            "legal_moves": list(self.game.legal_moves()) if to_act and self.game else [],
            "turn": self.turn,
            "action_valid": seat.action_valid,
            "invalid_moves": seat.invalid_moves,
            **self.extra_info(agent),
        }
        if over:
            info["outcome"] = self.outcomes[agent]
            info["end_reason"] = self.end_reason
        return info

    def _observation_text(self, agent: str) -> str:
        assert self.game is not None, "call reset() before observe()"
        seat = self.seats[agent]
        parts: list[str] = []
        if seat.replies == 0:
            parts.append(self.game.rules(agent))
        parts.extend(seat.news)
        parts.append(self.game.view(agent))
        if self.end_reason is not None:
            parts.append(_ENDINGS[self.outcomes[agent]])
        elif agent == self.agent_selection:
            moves = self.game.legal_moves()
            parts.append(
                f"Legal moves: {', '.join(moves)}\nReply with your move in backticks, "
                f"e.g. `{moves[0]}`."
            )
        else:
            parts.append(f"Waiting for {self.agent_selection} to move.")
        return "\n\n".join(part for part in parts if part)


_ENDINGS = {
    "win": "The game is over: you won.",
    "loss": "The game is over: you lost.",
    "draw": "The game is over: a draw.",
}


def make_versions(
    raw_env: Callable[..., AECEnv],
) -> tuple[Callable[..., AECEnv], Callable[..., Any]]:
    """PettingZoo's ``env()`` and ``parallel_env()`` for a turn-based ``raw_env`` class."""

    def env(**kwargs: Any) -> AECEnv:
        return wrappers.OrderEnforcingWrapper(raw_env(**kwargs))

    def parallel_env(**kwargs: Any) -> Any:
        return turn_based_aec_to_parallel(env(**kwargs))

    env.__doc__ = f"The AEC form of {raw_env.__name__}, with PettingZoo's order checks."
    parallel_env.__doc__ = f"The parallel form of {raw_env.__name__} (one mover per step)."
    return env, parallel_env
