"""referential_v0: a cooperative referential game - a speaker describes, a listener picks.

``from rllm_envs.multiagent import referential_v0``; ``referential_v0.parallel_env()`` (native),
``referential_v0.env()`` (AEC through PettingZoo's ``parallel_to_aec``), ``referential_v0.raw_env``.

Game
    ``rounds`` rounds (default 3). Each round the speaker sees ``num_candidates`` items (default
    3, from 48 everyday nouns) and which one is the target, and writes a message; then the
    listener sees the same items in its own order (so "the first one" means nothing) and the
    message, and picks an item. Both score when the listener picks the target: the pair must
    communicate. Random valid play scores ``1 / num_candidates`` a round. The seed draws the
    items, targets and orders.

Agents and phases
    ``speaker_0`` (role ``speaker``) and ``listener_0`` (role ``listener``). Each cycle one of
    them acts: speak, listen, speak, ... The other's action is ignored; its info says
    ``to_act: False``.

Observation
    ``{"text": str}``. Before its first reply each agent is told the rules. The speaker's
    turn: the previous round's result, ``Round i of n. Items: a, b, c. Target: b.``. The
    listener's turn: ``The speaker says: "..."`` and the numbered items. The end: how many
    rounds were correct.

Action grammar
    Speaker: any text (after a closing ``</think>``), clipped to ``max_message_chars``
    (default 200); empty is allowed. With ``taboo=True`` a message containing the target's
    name is invalid and the listener gets no message. Listener: an item, by the shared grammar
    of :mod:`rllm_envs.multiagent.moves` (backticks, ``Answer:``, the item named last), or its
    number in the listener's list alone (``2``).

Reward
    After each listener reply: 1.0 to both when it picked the target, else 0.0. An invalid
    reply (a listener reply naming no item; a taboo message) costs its author
    ``invalid_penalty`` (0.5) and the round is played on (the listener's invalid reply is a
    miss).

Episode end
    terminated after the last round. truncated when ``max_cycles`` cycles (default
    ``2 * rounds``) have run first.

Info (every agent, every step)
    ``task_id``, ``role``, ``to_act``, ``legal_moves`` (the listener's items on its turn,
    else empty), ``turn``, ``action_valid``, ``invalid_moves``, ``round``, ``rounds_correct``,
    ``rounds_played``; the speaker's ``items`` and ``target``; the listener's ``items`` (its
    order) and ``message``; at the end ``end_reason``.

Arguments
    ``rounds`` (3), ``num_candidates`` (3), ``max_message_chars`` (200), ``taboo`` (False),
    ``invalid_penalty`` (0.5), ``items`` (the item list), ``max_cycles`` (2 * rounds),
    ``render_mode`` (``"ansi"``), ``max_observation_chars`` (8192).
    ``options={"task": {"rounds": [{"items": [...], "target": ..., "listener_items":
    [...]}]}}`` plays given rounds.

Version history
    v0: first version.
"""

from rllm_envs.multiagent.referential.game import ITEMS, ReferentialEnv

__all__ = ["ITEMS", "ReferentialEnv"]
