"""`ClassicTextEnv`: one of PettingZoo's own turn-based games, played in text."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from gymnasium import spaces as gym_spaces

from rllm_envs.core.extras import require_extra
from rllm_envs.multiagent.classic.codecs import GameCodec, codec_for
from rllm_envs.multiagent.turn_env import TurnTextEnv

DEFAULT_GAME = "tictactoe_v3"


def make_inner(game: str, **kwargs: Any) -> Any:
    """The PettingZoo AEC env `game` from PettingZoo's registry (``tictactoe_v3`` is short for
    ``classic/tictactoe_v3``)."""
    require_extra("multiagent", "pygame")
    # pygame prints a banner on import unless told not to; it would land in every log.
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import pettingzoo

    env_id = game if "/" in game else f"classic/{game}"
    return pettingzoo.make("aec", env_id, **kwargs)


def legal_actions(inner: Any, agent: str) -> list[int]:
    """The actions `agent` may take: its action mask (observation or info), else all."""
    observation = inner.observe(agent)
    mask = None
    if isinstance(observation, dict) and "action_mask" in observation:
        mask = observation["action_mask"]
    elif "action_mask" in inner.infos.get(agent, {}):
        mask = inner.infos[agent]["action_mask"]
    if mask is not None:
        return [int(i) for i in np.flatnonzero(np.asarray(mask))]
    return list(range(int(inner.action_space(agent).n)))


class ClassicGame:
    """A :class:`~rllm_envs.multiagent.turn_env.TurnGame` over a PettingZoo AEC env.

    Rewards the inner env hands out along the way are summed and paid at the end.
    """

    def __init__(self, inner: Any, codec: GameCodec) -> None:
        # The raw env: only legal moves reach it, so PettingZoo's checking wrappers have
        # nothing to catch, and reading state through them costs more than the game itself.
        self.inner = inner.unwrapped
        self.codec = codec
        self.totals = dict.fromkeys(inner.possible_agents, 0.0)
        self._moves: dict[str, int] | None = None
        self._over = False

    def current_player(self) -> str:
        return self.inner.agent_selection

    def move_table(self) -> dict[str, int]:
        if self._moves is None:  # computed once per position: chess moves cost some work
            agent = self.current_player()
            self._moves = self.codec.moves(self.inner, agent, legal_actions(self.inner, agent))
        return self._moves

    def legal_moves(self) -> list[str]:
        return [] if self.is_over() else list(self.move_table())

    def aliases(self) -> dict[str, str]:
        if self.is_over():
            return {}
        return self.codec.aliases(self.inner, self.current_player(), self.move_table())

    def play(self, move: str) -> str:
        mover = self.current_player()
        inner = self.inner
        inner.step(self.move_table()[move])
        self._moves = None
        for agent, reward in inner.rewards.items():
            self.totals[agent] += float(reward)
        self._over = not inner.agents or any(
            inner.terminations[agent] or inner.truncations[agent] for agent in inner.agents
        )
        return f"{mover} played {move}."

    def is_over(self) -> bool:
        return self._over

    def returns(self) -> dict[str, float]:
        return dict(self.totals)

    def view(self, agent: str | None) -> str:
        return self.codec.picture(self.inner, agent)

    def rules(self, agent: str) -> str:
        return self.codec.rules(self.inner, agent)


class ClassicTextEnv(TurnTextEnv):
    """PettingZoo classic games as text (contract card: :mod:`rllm_envs.multiagent.classic`)."""

    metadata = {**TurnTextEnv.metadata, "name": "classic_v0"}

    def __init__(
        self,
        game: str = DEFAULT_GAME,
        *,
        invalid_move_allowance: int = 1,
        forfeit_rewards: tuple[float, float] = (-1.5, 0.5),
        max_turns: int | None = None,
        render_mode: str | None = None,
        max_observation_chars: int = 8_192,
        **inner_kwargs: Any,
    ) -> None:
        self.inner = make_inner(game, **inner_kwargs)
        try:
            agents = tuple(self.inner.possible_agents)
            for agent in agents:
                if not isinstance(self.inner.action_space(agent), gym_spaces.Discrete):
                    raise ValueError(
                        f"{game} acts in {self.inner.action_space(agent)}; the classic adapter "
                        "reads moves of Discrete action spaces"
                    )
            super().__init__(
                agents,
                invalid_move_allowance=invalid_move_allowance,
                forfeit_rewards=forfeit_rewards,
                max_turns=max_turns,
                render_mode=render_mode,
                max_observation_chars=max_observation_chars,
            )
        except Exception:
            self.inner.close()
            raise
        self.game_name = game.rsplit("/", 1)[-1]
        self.codec = codec_for(self.game_name)
        self.inner_closed = False

    def draw_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return {"seed": int(rng.integers(2**31))}

    def new_game(self, task: dict[str, Any]) -> ClassicGame:
        self.inner.reset(seed=task.get("seed"))
        return ClassicGame(self.inner, self.codec)

    def task_id(self, task: dict[str, Any]) -> str:
        # The classic board games start from the same position whatever the seed.
        return f"classic/{self.game_name}"

    @property
    def move_aliases(self) -> dict[str, str]:  # type: ignore[override]
        return self.game.aliases() if isinstance(self.game, ClassicGame) else {}

    @property
    def aliases_in_prose(self) -> bool:  # type: ignore[override]
        return self.codec.aliases_in_prose

    def close(self) -> None:
        if not self.inner_closed:
            self.inner_closed = True
            self.inner.close()
