"""classic_v0: PettingZoo's own classic games (tic-tac-toe, Connect Four, chess, ...) in text.

``from rllm_envs.multiagent import classic_v0``; ``classic_v0.env(game="connect_four_v3")``
(AEC), ``classic_v0.parallel_env(game=...)`` (one mover per step), ``classic_v0.raw_env``.
Needs the ``multiagent`` extra (``pip install 'rllm-envs[multiagent]'``: PettingZoo's
``classic`` games). What ``rllm/GymText-v0`` is for Gymnasium envs, this is for PettingZoo's
turn-based games: the inner env is made with ``pettingzoo.make("aec", "classic/<game>",
**inner_kwargs)`` and keeps its rules, agents and rewards; moves become text, the legal ones
are listed, the board is drawn in text.

Games
    ``tictactoe_v3`` (default; cells ``A1``..``C3``), ``connect_four_v3`` (columns ``1``..``7``),
    ``chess_v6`` (UCI ``e2e4``; SAN ``Nf3`` accepted unless two moves read alike ignoring
    case). Any other registered AEC game with a Discrete action space (``go_v5``,
    ``leduc_holdem_v4``, ``game="butterfly/..."`` ids too) plays with action numbers as moves
    and its observation written as numbers.

Agents
    The inner env's (``player_1``/``player_2`` for tic-tac-toe, ``player_0``/``player_1`` for
    Connect Four and chess); each is its own role.

Observation
    ``{"text": str}``: the rules before a player's first move, what happened since its last
    reply, the board from its side (its pieces named), and on its turn the legal moves.

Action grammar
    A legal move's name, read by the shared grammar of :mod:`rllm_envs.multiagent.moves`
    (backticks, ``Move:``, or the legal move named last). Only legal actions ever reach the
    inner env (so its own illegal-move wrapper never fires).

Reward
    The inner env's rewards (classic games: +1 win, -1 loss, 0 draw), summed and paid when the
    game ends. Invalid move: rejected with an observation saying why, the same player moves
    again; the ``invalid_move_allowance + 1``-th invalid reply forfeits with
    ``forfeit_rewards`` (-1.5 to the offender, +0.5 to each other player).

Episode end
    terminated when the inner game ends or on a forfeit. truncated after ``max_turns`` replies
    (default none; chess ends by itself through its draw rules), a 0/0 draw.

Info (every agent, every step)
    ``task_id`` (``classic/<game>``), ``role``, ``to_act``, ``legal_moves``, ``turn``,
    ``action_valid``, ``invalid_moves``; at the end ``outcome`` and ``end_reason``.

Arguments
    ``game`` (``"tictactoe_v3"``), ``invalid_move_allowance`` (1), ``forfeit_rewards``
    ((-1.5, 0.5)), ``max_turns`` (None), ``render_mode`` (``"ansi"``: the board),
    ``max_observation_chars`` (8192), ``**inner_kwargs`` for ``pettingzoo.make``. The reset
    seed is passed on to the inner env.

Version history
    v0: first version.
"""

from rllm_envs.multiagent.classic.codecs import CODECS, GameCodec
from rllm_envs.multiagent.classic.env import ClassicGame, ClassicTextEnv

__all__ = ["CODECS", "ClassicGame", "ClassicTextEnv", "GameCodec"]
