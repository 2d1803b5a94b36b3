"""Scripted players for the multi-agent envs: fixed opponents and partners, by name.

Each is a function ``(observation, info, rng) -> reply`` for
:class:`~rllm_agents.execution.policies.ScriptedPolicy`, reading what the envs put in
``info`` (``legal_moves`` always; a game's own keys where a player needs more):

==================== ==================================================================
``random``           a uniformly random legal move; an empty reply where moves are free
``first``            the first legal move listed
``tictactoe_expert`` tic-tac-toe: win, else block, else centre, corner, side (``board``)
``oracle_speaker``   referential game: names the target (``target``)
``literal_listener`` referential game: the item the message names, else a random one
==================== ==================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

ScriptedMove = Callable[[Any, dict[str, Any], np.random.Generator], str]


def random_move(observation: Any, info: dict[str, Any], rng: np.random.Generator) -> str:
    moves = info.get("legal_moves") or []
    return f"`{moves[int(rng.integers(len(moves)))]}`" if moves else ""


def first_move(observation: Any, info: dict[str, Any], rng: np.random.Generator) -> str:
    moves = info.get("legal_moves") or []
    return f"`{moves[0]}`" if moves else ""


def tictactoe_expert(observation: Any, info: dict[str, Any], rng: np.random.Generator) -> str:
    """Win if it can, else block the opponent's line, else centre, corners, sides."""
    from rllm_envs.multiagent.tictactoe.game import CELLS, EMPTY, LINES, MARKS

    board, mine = info["board"], info["mark"]
    theirs = MARKS[1 - MARKS.index(mine)]
    legal = set(info.get("legal_moves") or [])
    for mark in (mine, theirs):  # complete our line first, then stop theirs
        for line in LINES:
            marks = [board[i] for i in line]
            if marks.count(mark) == 2 and marks.count(EMPTY) == 1:
                cell = CELLS[line[marks.index(EMPTY)]]
                if cell in legal:
                    return f"`{cell}`"
    for cell in ("B2", "A1", "C1", "A3", "C3", "B1", "A2", "C2", "B3"):
        if cell in legal:
            return f"`{cell}`"
    return ""


def oracle_speaker(observation: Any, info: dict[str, Any], rng: np.random.Generator) -> str:
    return f"The target is {info['target']}." if info.get("target") else ""


def literal_listener(observation: Any, info: dict[str, Any], rng: np.random.Generator) -> str:
    message = str(info.get("message", "")).lower()
    named = [item for item in info.get("legal_moves") or [] if item.lower() in message]
    return f"`{named[-1]}`" if named else random_move(observation, info, rng)


OPPONENTS: dict[str, ScriptedMove] = {
    "random": random_move,
    "first": first_move,
    "tictactoe_expert": tictactoe_expert,
    "oracle_speaker": oracle_speaker,
    "literal_listener": literal_listener,
}


def scripted_move(name: str) -> ScriptedMove:
    try:
        return OPPONENTS[name]
    except KeyError:
        raise ValueError(
            f"unknown scripted player {name!r}; choose from {sorted(OPPONENTS)}"
        ) from None
