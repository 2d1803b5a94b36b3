"""kuhn_poker_v0: Kuhn poker between two text players (PettingZoo AEC and parallel forms).

``from rllm_envs.multiagent import kuhn_poker_v0``; ``kuhn_poker_v0.env()``,
``kuhn_poker_v0.parallel_env()``, ``kuhn_poker_v0.raw_env``.

Game
    Three cards, J < Q < K; each player antes 1 chip and is dealt one card (seeded: the reset
    seed picks the deal). ``player_0`` acts first: ``check`` or ``bet`` (1 chip). Facing a bet:
    ``call`` or ``fold``. Check-check or bet-call goes to a showdown, where the higher card
    takes the pot. A hand lasts two or three moves.

Agents
    ``player_0`` (acts first) and ``player_1``; each is its own role.

Observation
    ``{"text": str}``: the rules before a player's first move, then what happened since its
    last reply, its card, its chips in, the pot and the actions so far; on its turn the legal
    moves. Cards are shown to both after a showdown.

Action grammar
    ``check``, ``bet``, ``call`` or ``fold``, read by the shared grammar of
    :mod:`rllm_envs.multiagent.moves` (backticks, ``Move:``, or the legal move named last).

Reward
    At the end, the chips won or lost: +1/-1 (a fold, or a check-check showdown) or +2/-2 (a
    called bet). Invalid move: rejected with an observation saying why, the same player moves
    again; the ``invalid_move_allowance + 1``-th invalid reply forfeits with
    ``forfeit_rewards`` (-1.5 to the offender, +0.5 to the other).

Episode end
    terminated: a fold, a showdown or a forfeit. truncated: ``max_turns`` replies (default
    none), a 0/0 draw.

Info (every agent, every step)
    ``task_id`` (``kuhn_poker/<card of player_0><card of player_1>``), ``role``, ``to_act``,
    ``legal_moves``, ``turn``, ``action_valid``, ``invalid_moves``, ``card`` (the agent's own),
    ``history`` (moves so far); at the end ``outcome`` and ``end_reason``.

Arguments
    ``options={"task": {"cards": ["K", "J"]}}`` deals given cards. ``invalid_move_allowance``
    (1), ``forfeit_rewards`` ((-1.5, 0.5)), ``max_turns`` (None), ``render_mode`` (``"ansi"``),
    ``max_observation_chars`` (8192).

Reference
    The game's value for player_0 is -1/18 chip a hand. Against a uniformly random opponent a
    best response earns +0.5 a hand as player_0 and +0.417 as player_1.

Version history
    v0: first version.
"""

from rllm_envs.multiagent.kuhn_poker.game import DECK, KuhnPoker, KuhnPokerEnv

__all__ = ["DECK", "KuhnPoker", "KuhnPokerEnv"]
