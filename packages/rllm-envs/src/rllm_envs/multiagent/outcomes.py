"""Win, draw or loss per player, from a finished game's rewards."""

from __future__ import annotations

from collections.abc import Mapping

OUTCOMES = ("win", "draw", "loss")


def outcomes_from_returns(returns: Mapping[str, float], loser: str | None = None) -> dict[str, str]:
    """Players with the highest reward win and the rest lose; equal rewards are a draw.

    ``loser`` (a player who forfeited) loses whatever the rewards say, and the others win.
    """
    if loser is not None:
        return {agent: "loss" if agent == loser else "win" for agent in returns}
    best = max(returns.values(), default=0.0)
    if all(value == best for value in returns.values()):
        return dict.fromkeys(returns, "draw")
    return {agent: "win" if value == best else "loss" for agent, value in returns.items()}
