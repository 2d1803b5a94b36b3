"""Tic-tac-toe rules and state (text in, text out; no PettingZoo bookkeeping)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rllm_envs.multiagent.turn_env import TurnTextEnv

PLAYERS = ("player_0", "player_1")
MARKS = ("X", "O")
EMPTY = "."
COLUMNS = "ABC"
CELLS = tuple(f"{COLUMNS[i % 3]}{i // 3 + 1}" for i in range(9))  # reading order, A1 top left
LINES = (
    (0, 1, 2), (3, 4, 5), (6, 7, 8),  # rows
    (0, 3, 6), (1, 4, 7), (2, 5, 8),  # columns
    (0, 4, 8), (2, 4, 6),  # diagonals
)  # fmt: skip


def cell_index(label: str) -> int:
    return CELLS.index(label)


def board_picture(board: Sequence[str]) -> str:
    """A 9-cell board (reading order) as text: column letters on top, row numbers on the left."""
    rows = ["  A B C"] + [f"{r + 1} " + " ".join(board[3 * r : 3 * r + 3]) for r in range(3)]
    return "\n".join(rows)


def winner(board: str) -> str | None:
    """The mark with three in a row on a 9-character board, if any."""
    for a, b, c in LINES:
        if board[a] != EMPTY and board[a] == board[b] == board[c]:
            return board[a]
    return None


@dataclass
class TicTacToe:
    """One game; ``board`` is 9 characters in reading order (``X``, ``O`` or ``.``)."""

    board: list[str] = field(default_factory=lambda: [EMPTY] * 9)
    mover: int = 0

    def current_player(self) -> str:
        return PLAYERS[self.mover]

    def legal_moves(self) -> list[str]:
        if self.is_over():
            return []
        return [CELLS[i] for i, mark in enumerate(self.board) if mark == EMPTY]

    def play(self, move: str) -> str:
        mark = MARKS[self.mover]
        self.board[cell_index(move)] = mark
        told = f"{PLAYERS[self.mover]} ({mark}) played {move}."
        self.mover = 1 - self.mover
        return told

    def is_over(self) -> bool:
        return winner("".join(self.board)) is not None or EMPTY not in self.board

    def returns(self) -> dict[str, float]:
        won = winner("".join(self.board))
        if won is None:
            return dict.fromkeys(PLAYERS, 0.0)
        return {player: 1.0 if MARKS[i] == won else -1.0 for i, player in enumerate(PLAYERS)}

    def view(self, agent: str | None) -> str:
        picture = board_picture(self.board)
        if agent is None:
            return picture
        return f"Board (you are {MARKS[PLAYERS.index(agent)]}):\n{picture}"

    def rules(self, agent: str) -> str:
        me = PLAYERS.index(agent)
        return (
            f"You are playing tic-tac-toe as {MARKS[me]} against {PLAYERS[1 - me]} "
            f"({MARKS[1 - me]}); X moves first. Take turns marking an empty cell; three of "
            "your marks in a row, column or diagonal wins. Cells are named by column letter "
            "and row number, from A1 (top left) to C3 (bottom right)."
        )


class TicTacToeEnv(TurnTextEnv):
    """Tic-tac-toe for two text players (contract card: :mod:`rllm_envs.multiagent.tictactoe`)."""

    metadata = {**TurnTextEnv.metadata, "name": "tictactoe_v0"}
    # Cells numbered 1-9 in reading order are accepted as the move alone (not inside prose).
    move_aliases = {str(i + 1): cell for i, cell in enumerate(CELLS)}

    def __init__(self, *, opening_moves: int = 0, **kwargs: Any) -> None:
        if not 0 <= opening_moves <= 4:
            raise ValueError(f"opening_moves must be 0 to 4, got {opening_moves}")
        super().__init__(PLAYERS, **kwargs)
        self.opening_moves = opening_moves

    def new_game(self, task: dict[str, Any]) -> TicTacToe:
        game = TicTacToe()
        for move in task.get("opening", []):  # a position to start from, e.g. ["B2", "A1"]
            if move not in game.legal_moves():
                raise ValueError(f"opening move {move!r} is not legal in {game.board}")
            game.play(move)
        if game.is_over():
            raise ValueError("the opening already ends the game")
        return game

    def task_id(self, task: dict[str, Any]) -> str:
        opening = "-".join(task.get("opening", []))
        return f"tictactoe/{opening}" if opening else "tictactoe"

    def extra_info(self, agent: str) -> dict[str, Any]:
        assert isinstance(self.game, TicTacToe)
        return {"board": "".join(self.game.board), "mark": MARKS[PLAYERS.index(agent)]}

    def draw_task(self, rng: np.random.Generator) -> dict[str, Any]:
        """``opening_moves`` random moves (no four of them can end a game)."""
        game, opening = TicTacToe(), []
        for _ in range(self.opening_moves):
            move = str(rng.choice(game.legal_moves()))
            game.play(move)
            opening.append(move)
        return {"opening": opening}
