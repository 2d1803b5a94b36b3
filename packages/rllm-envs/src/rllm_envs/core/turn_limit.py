"""How many turns an env allows an episode: what rllm-eval and rllm-train play by default."""

from __future__ import annotations

from typing import Any

# Played where an env states no limit of its own (a Gymnasium env without max_episode_steps).
FALLBACK_TURNS = 8


def turn_limit(env: Any) -> int | None:
    """The env's own turn limit, or None where it states none.

    An rllm env's ``max_turns`` (the limit its episodes are truncated at; FrozenLake's depends
    on the lake), else the ``max_episode_steps`` it was registered with (Gymnasium's TimeLimit).
    """
    own = getattr(getattr(env, "unwrapped", env), "max_turns", None)
    if isinstance(own, int) and not isinstance(own, bool) and own > 0:
        return own
    spec = getattr(env, "spec", None)
    steps = getattr(spec, "max_episode_steps", None)
    return steps if isinstance(steps, int) and steps > 0 else None


def default_turns(env: Any) -> int:
    """The turns to play when the user gives none: the env's limit, else FALLBACK_TURNS."""
    return turn_limit(env) or FALLBACK_TURNS
