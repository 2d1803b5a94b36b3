"""The OpenEnv wire format of a text env's turns: pure functions from Gymnasium results to JSON
bodies and from JSON bodies to actions.

OpenEnv's observation carries ``done`` and ``reward`` beside its own fields and has no
``truncated``: ``done`` is ``terminated or truncated``, and the two flags travel as ordinary
fields of the observation, with the env's ``info`` (made JSON-safe), so a client that knows
Gymnasium loses nothing. A text env's action is ``{"text": "..."}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTION_FIELD = "text"


class MessageError(ValueError):
    """A reset or step body this protocol cannot use (answered 422, or a WS error)."""


@dataclass(frozen=True)
class Turn:
    """One Gymnasium result: what ``reset`` (reward None) or ``step`` gave."""

    observation: Any
    info: Mapping[str, Any]
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def turn_body(turn: Turn) -> dict[str, Any]:
    """The body OpenEnv's clients read: ``{"observation": {...}, "reward": r, "done": d}``."""
    return {
        "observation": {
            "text": json_safe(turn.observation),
            "terminated": turn.terminated,
            "truncated": turn.truncated,
            "info": json_safe(dict(turn.info)),
        },
        "reward": None if turn.reward is None else float(turn.reward),
        "done": turn.done,
    }


def turn_from_body(body: Mapping[str, Any]) -> Turn:
    """The Gymnasium view of an observation body (the inverse of :func:`turn_body`); a body
    from a server that sends no ``terminated`` / ``truncated`` counts ``done`` as terminated."""
    observation = body.get("observation") or {}
    done = bool(body.get("done", False))
    terminated = bool(observation.get("terminated", done))
    truncated = bool(observation.get("truncated", False))
    text = observation.get("text", observation)
    return Turn(
        observation=text,
        info=dict(observation.get("info") or {}),
        reward=body.get("reward"),
        terminated=terminated,
        truncated=truncated and not terminated,
    )


def action_from_body(data: Any) -> str:
    """The action text of a step's data (``{"text": "..."}``), or an MessageError saying what
    a well-formed one looks like."""
    if not isinstance(data, Mapping):
        raise MessageError(f'an action is a JSON object {{"{ACTION_FIELD}": "..."}}, not {data!r}')
    text = data.get(ACTION_FIELD)
    if not isinstance(text, str):
        raise MessageError(f'an action needs "{ACTION_FIELD}" as a string; got keys {sorted(data)}')
    return text


def reset_arguments(data: Any) -> tuple[int | None, dict[str, Any]]:
    """The seed and Gymnasium reset options of a reset's data (``{"seed": 3, "options": {}}``;
    OpenEnv's ``episode_id`` is kept by the session, not the env)."""
    if data is None:
        return None, {}
    if not isinstance(data, Mapping):
        raise MessageError(f"reset data is a JSON object, not {data!r}")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise MessageError(f"seed must be an integer, not {seed!r}")
    options = data.get("options") or {}
    if not isinstance(options, Mapping):
        raise MessageError(f"options must be a JSON object, not {options!r}")
    return seed, dict(options)


def json_safe(value: Any) -> Any:
    """`value` as JSON can carry it: numpy scalars and arrays as numbers and lists, tuples and
    sets as lists, keys as strings, non-finite floats as strings, anything else as its repr."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(item) for item in value]
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return json_safe(tolist())
    return repr(value)


def schema(env_id: str) -> dict[str, Any]:
    """JSON Schemas of the action, the observation and the state (``GET /schema``)."""
    return {
        "action": {
            "title": f"{env_id} action",
            "type": "object",
            "properties": {ACTION_FIELD: {"type": "string"}},
            "required": [ACTION_FIELD],
        },
        "observation": {
            "title": f"{env_id} observation",
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "terminated": {"type": "boolean"},
                "truncated": {"type": "boolean"},
                "info": {"type": "object"},
            },
        },
        "state": {
            "title": f"{env_id} state",
            "type": "object",
            "properties": {
                "episode_id": {"type": ["string", "null"]},
                "step_count": {"type": "integer"},
            },
        },
    }
