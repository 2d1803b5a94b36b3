"""How PettingZoo's classic games read and write as text: move names, boards and rules.

Each :class:`GameCodec` names the legal actions of the player to move (``moves``: label →
action index), may accept other spellings (``aliases``: alias → label), draws the game from
a player's side (``picture``) and states the rules (``rules``). Games without a codec of
their own get :data:`GENERIC`: action numbers as moves and the observation as numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllm_envs.gymtext import codecs as gym_codecs

Inner = Any  # a PettingZoo AEC env (wrapped as pettingzoo.make returns it)


def _no_aliases(inner: Inner, agent: str, moves: dict[str, int]) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class GameCodec:
    rules: Callable[[Inner, str], str]
    moves: Callable[[Inner, str, list[int]], dict[str, int]]
    picture: Callable[[Inner, str | None], str]
    aliases: Callable[[Inner, str, dict[str, int]], dict[str, str]] = _no_aliases
    aliases_in_prose: bool = False  # aliases are words no reply uses by chance (SAN)


def _player_index(inner: Inner, agent: str | None) -> int:
    return 0 if agent is None else inner.possible_agents.index(agent)


def _planes_picture(inner: Inner, agent: str | None, grid: Callable[[np.ndarray], np.ndarray]):
    """Marks from a two-plane observation (own, opponent), first player X, second O."""
    viewer = agent if agent is not None else inner.possible_agents[0]
    planes = grid(np.asarray(inner.observe(viewer)["observation"]))
    own, other = ("X", "O") if _player_index(inner, viewer) == 0 else ("O", "X")
    marks = np.full(planes.shape[:2], ".", dtype=object)
    marks[planes[..., 0] == 1] = own
    marks[planes[..., 1] == 1] = other
    return marks, own


# -- tic-tac-toe: action i is the cell in column i // 3, row i % 3 ------------------------------
def _tictactoe_label(action: int) -> str:
    return f"{'ABC'[action // 3]}{action % 3 + 1}"


def _tictactoe_picture(inner: Inner, agent: str | None) -> str:
    from rllm_envs.multiagent.tictactoe.game import board_picture

    # observation[column, row, plane]: transpose to rows first.
    marks, own = _planes_picture(inner, agent, lambda obs: obs.transpose(1, 0, 2))
    heading = f"Board (you are {own}):" if agent is not None else "Board:"
    return heading + "\n" + board_picture(marks.reshape(-1).tolist())


TICTACTOE = GameCodec(
    rules=lambda inner, agent: (
        f"You are playing tic-tac-toe as {'XO'[_player_index(inner, agent)]} (X moves first). "
        "Take turns marking an empty cell; three in a row, column or diagonal wins. Cells are "
        "named by column letter and row number, from A1 (top left) to C3 (bottom right)."
    ),
    moves=lambda inner, agent, legal: {_tictactoe_label(a): a for a in legal},
    picture=_tictactoe_picture,
)


# -- connect four: action i drops a piece in column i -------------------------------------------
def _connect_four_picture(inner: Inner, agent: str | None) -> str:
    marks, own = _planes_picture(inner, agent, lambda obs: obs)
    rows = [" ".join(row) for row in marks] + [" ".join(str(c + 1) for c in range(marks.shape[1]))]
    heading = f"Board (you are {own}; pieces fall to the lowest free cell):" if agent else "Board:"
    return heading + "\n" + "\n".join(rows)


CONNECT_FOUR = GameCodec(
    rules=lambda inner, agent: (
        f"You are playing Connect Four as {'XO'[_player_index(inner, agent)]} (X moves first). "
        "Take turns dropping a piece into a column (1 to 7); it falls to the lowest free cell. "
        "Four of your pieces in a row, column or diagonal wins."
    ),
    moves=lambda inner, agent, legal: {str(a + 1): a for a in legal},
    picture=_connect_four_picture,
)


# -- chess: moves in UCI, SAN accepted -----------------------------------------------------------
def _chess_board(inner: Inner) -> Any:
    return inner.unwrapped.board


def _chess_moves(inner: Inner, agent: str, legal: list[int]) -> dict[str, int]:
    from pettingzoo.classic.chess import chess_utils

    board, player = _chess_board(inner), _player_index(inner, agent)
    return {chess_utils.action_to_move(board, a, player).uci(): a for a in legal}


def _chess_aliases(inner: Inner, agent: str, moves: dict[str, int]) -> dict[str, str]:
    """SAN spellings (``Nf3``, ``O-O``); ones that read alike ignoring case are dropped."""
    import chess

    from rllm_envs.multiagent.moves import normalize

    board = _chess_board(inner)
    by_form: dict[str, list[tuple[str, str]]] = {}
    for uci in moves:
        san = board.san(chess.Move.from_uci(uci))
        by_form.setdefault(normalize(san), []).append((san, uci))
    return {pairs[0][0]: pairs[0][1] for pairs in by_form.values() if len(pairs) == 1}


def _chess_picture(inner: Inner, agent: str | None) -> str:
    board = _chess_board(inner)
    side = "white" if _player_index(inner, agent) == 0 else "black"
    heading = f"Board (you play {side}; uppercase is white, rank 8 at the top):" if agent else ""
    ranks = str(board).splitlines()
    rows = [f"{8 - i} {rank}" for i, rank in enumerate(ranks)] + ["  a b c d e f g h"]
    text = "\n".join(rows)
    return f"{heading}\n{text}\nFEN: {board.fen()}" if heading else text


CHESS = GameCodec(
    rules=lambda inner, agent: (
        f"You are playing chess as {'white' if _player_index(inner, agent) == 0 else 'black'}. "
        "Write moves in UCI (e2e4, g1f3, e7e8q) or SAN (e4, Nf3, O-O). Checkmate wins; "
        "stalemate, insufficient material and claimable draws end the game drawn."
    ),
    moves=_chess_moves,
    picture=_chess_picture,
    aliases=_chess_aliases,
    aliases_in_prose=True,
)


# -- any other game with discrete actions --------------------------------------------------------
def _generic_picture(inner: Inner, agent: str | None) -> str:
    viewer = agent if agent is not None else inner.agent_selection
    observation = inner.observe(viewer)
    space = inner.observation_space(viewer)
    if isinstance(observation, dict) and "observation" in observation:
        observation, space = observation["observation"], space["observation"]
    return "Observation: " + gym_codecs.render(space, observation)


GENERIC = GameCodec(
    rules=lambda inner, agent: (
        f"You are {agent} in the PettingZoo game {inner.metadata.get('name', 'unknown')}. "
        "Actions are numbers; the legal ones are listed on your turn."
    ),
    moves=lambda inner, agent, legal: {str(a): a for a in legal},
    picture=_generic_picture,
)

CODECS: dict[str, GameCodec] = {
    "tictactoe_v3": TICTACTOE,
    "connect_four_v3": CONNECT_FOUR,
    "chess_v6": CHESS,
}


def codec_for(name: str) -> GameCodec:
    return CODECS.get(name, GENERIC)
