"""Kuhn poker rules and state: three cards, one betting round, two players."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rllm_envs.multiagent.turn_env import TurnTextEnv

PLAYERS = ("player_0", "player_1")
DECK = ("J", "Q", "K")  # in rising order
ANTE = 1
BET = 1
_PAST_TENSE = {"check": "checked", "bet": "bet", "call": "called", "fold": "folded"}


@dataclass
class KuhnPoker:
    """One hand: ``cards[i]`` is player i's card; ``history`` the actions so far."""

    cards: tuple[str, str]
    history: list[str] = field(default_factory=list)

    def current_player(self) -> str:
        return PLAYERS[len(self.history) % 2]

    def legal_moves(self) -> list[str]:
        if self.is_over():
            return []
        return ["call", "fold"] if self.history and self.history[-1] == "bet" else ["check", "bet"]

    def play(self, move: str) -> str:
        mover = self.current_player()
        self.history.append(move)
        told = f"{mover} {_PAST_TENSE[move]}."
        if self.is_over() and self.showdown():
            told += f" Showdown: player_0 has {self.cards[0]}, player_1 has {self.cards[1]}."
        return told

    def is_over(self) -> bool:
        return self.history in (
            ["check", "check"],
            ["bet", "call"],
            ["bet", "fold"],
            ["check", "bet", "call"],
            ["check", "bet", "fold"],
        )

    def showdown(self) -> bool:
        return self.is_over() and self.history[-1] != "fold"

    def stakes(self) -> tuple[int, int]:
        """Chips each player has put in so far."""
        put = [ANTE, ANTE]
        for i, move in enumerate(self.history):
            if move in ("bet", "call"):
                put[i % 2] += BET
        return put[0], put[1]

    def returns(self) -> dict[str, float]:
        put = self.stakes()
        if self.history[-1] == "fold":
            folder = (len(self.history) - 1) % 2
            winner = 1 - folder
        else:
            winner = 0 if DECK.index(self.cards[0]) > DECK.index(self.cards[1]) else 1
        won = float(put[1 - winner])
        return {PLAYERS[winner]: won, PLAYERS[1 - winner]: -won}

    def view(self, agent: str | None) -> str:
        put = self.stakes()
        actions = ", ".join(
            f"{PLAYERS[i % 2]} {_PAST_TENSE[move]}" for i, move in enumerate(self.history)
        )
        lines = []
        if agent is None or self.showdown():
            lines.append(f"Cards: player_0 {self.cards[0]}, player_1 {self.cards[1]}.")
        if agent is not None:
            me = PLAYERS.index(agent)
            lines.append(f"Your card: {self.cards[me]}. You have put in {put[me]} chips.")
        lines.append(f"Pot: {sum(put)} chips. Actions so far: {actions or 'none'}.")
        return "\n".join(lines)

    def rules(self, agent: str) -> str:
        other = PLAYERS[1 - PLAYERS.index(agent)]
        return (
            f"You are playing Kuhn poker as {agent} against {other}. The deck has three cards, "
            "J < Q < K. Each player antes 1 chip and is dealt one card. player_0 acts first: "
            "check, or bet 1 chip. Facing a bet, call (put in 1 chip) or fold (give up the "
            "pot). If both check, or a bet is called, the higher card wins the pot."
        )


class KuhnPokerEnv(TurnTextEnv):
    """Kuhn poker for two text players (contract card: :mod:`rllm_envs.multiagent.kuhn_poker`)."""

    metadata = {**TurnTextEnv.metadata, "name": "kuhn_poker_v0"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(PLAYERS, **kwargs)

    def draw_task(self, rng: np.random.Generator) -> dict[str, Any]:
        dealt = rng.permutation(len(DECK))[:2]
        return {"cards": [DECK[int(i)] for i in dealt]}

    def new_game(self, task: dict[str, Any]) -> KuhnPoker:
        cards = task.get("cards")
        if (
            not isinstance(cards, (list, tuple))
            or len(cards) != 2
            or not set(cards) <= set(DECK)
            or cards[0] == cards[1]
        ):
            raise ValueError(f"a Kuhn poker task deals two different cards of {DECK}: {cards!r}")
        return KuhnPoker((str(cards[0]), str(cards[1])))

    def task_id(self, task: dict[str, Any]) -> str:
        return "kuhn_poker/" + "".join(task.get("cards", []))

    def extra_info(self, agent: str) -> dict[str, Any]:
        assert isinstance(self.game, KuhnPoker)
        return {"card": self.game.cards[PLAYERS.index(agent)], "history": list(self.game.history)}
