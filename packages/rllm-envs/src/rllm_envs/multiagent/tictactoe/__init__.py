"""tictactoe_v0: tic-tac-toe between two text players (PettingZoo AEC and parallel forms).

``from rllm_envs.multiagent import tictactoe_v0``; ``tictactoe_v0.env()`` (AEC),
``tictactoe_v0.parallel_env()`` (one mover per step), ``tictactoe_v0.raw_env`` (the class).

Agents
    ``player_0`` plays X and moves first; ``player_1`` plays O. Each is its own role.

Observation
    ``{"text": str}``. Before its first move a player is told the rules. Every observation
    says what happened since the player's last reply (the opponent's move, or why its own
    reply was rejected), shows the board and, on its turn, the legal moves::

        Board (you are O):
          A B C
        1 . . .
        2 . X .
        3 . . .

        Legal moves: A1, B1, C1, A2, C2, A3, B3, C3
        Reply with your move in backticks, e.g. `A1`.

Action grammar
    Text naming an empty cell, column letter then row number (``B2``), read by the shared
    grammar of :mod:`rllm_envs.multiagent.moves`: the last backtick span, else the text after
    ``Move:``, else the whole reply; else the legal cell named last in the reply. The cell
    numbers 1-9 in reading order are accepted as the whole move (``5`` is B2).

Reward
    At the end: +1 to the winner, -1 to the loser, 0 each for a draw. Invalid move: the reply
    is rejected with an observation saying why and the same player moves again; a player's
    ``invalid_move_allowance + 1``-th invalid reply (default: the 2nd) forfeits the game, with
    ``forfeit_rewards`` (-1.5 to the offender, +0.5 to the other). All other rewards are 0.

Episode end
    terminated: three in a row, a full board, or a forfeit. truncated: ``max_turns`` replies
    (valid or not, both players; default none) - a 0/0 draw.

Info (every agent, every step)
    ``task_id``, ``role``, ``to_act`` (this agent moves next), ``legal_moves`` (list of cells;
    empty when not to act), ``turn``, ``action_valid`` (its last reply), ``invalid_moves``,
    ``board`` (9 characters in reading order, ``X``/``O``/``.``), ``mark``; at the end
    ``outcome`` (``win`` | ``draw`` | ``loss``) and ``end_reason`` (``finished`` |
    ``forfeit`` | ``truncated``). Never an ``action_mask`` (PettingZoo's tests would sample
    the text action space with it).

Arguments
    ``opening_moves`` (0): that many random opening moves, drawn with the reset seed, for
    varied positions (``info["task_id"]`` names the opening); ``options={"task": {"opening":
    ["B2", "A1"]}}`` starts from given moves. ``invalid_move_allowance`` (1),
    ``forfeit_rewards`` ((-1.5, 0.5)), ``max_turns`` (None), ``render_mode`` (``"ansi"``:
    the board), ``max_observation_chars`` (8192).

Reference
    Uniform random legal play: player_0 wins 58.8 %, player_1 28.7 %, draws 12.6 %.

Version history
    v0: first version.
"""

from rllm_envs.multiagent.tictactoe.game import (
    CELLS,
    TicTacToe,
    TicTacToeEnv,
    board_picture,
    winner,
)

__all__ = ["CELLS", "TicTacToe", "TicTacToeEnv", "board_picture", "winner"]
