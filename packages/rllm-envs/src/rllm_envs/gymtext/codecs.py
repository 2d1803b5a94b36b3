"""How Gymnasium spaces become text and back: one (describe, render, parse) codec per space type.

`describe` says in words what a value of the space looks like, `render` writes a value as text,
and `parse` reads an action from a model's reply (or raises :class:`MessageError` saying why it
cannot). Observation spaces need only the first two; spaces without a `parse` cannot be acted in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s,;\[\]()]*")
_BACKTICK_SPAN = re.compile(r"`+([^`]*)`+")
_PREFIX = re.compile(r"^\s*action\s*[:=]\s*", re.IGNORECASE)
_SIGNIFICANT_DIGITS = 5
_MAX_CHARS_PER_NUMBER = 40
_LARGEST_INTEGER = 2**62


class MessageError(ValueError):
    """A reply that is not an action of the space; the message is shown to the agent."""


@dataclass(frozen=True)
class SpaceCodec:
    describe: Callable[[Any], str]
    render: Callable[[Any, Any], str]
    parse: Callable[[Any, str], Any] | None = None


# -- reading replies ---------------------------------------------------------------------------
def action_span(reply: str) -> str:
    """The part of a reply that holds the action: after ``</think>``, in the last backticks."""
    reply = reply.rpartition("</think>")[2]
    spans = _BACKTICK_SPAN.findall(reply)
    return spans[-1] if spans else reply


def read_numbers(text: str, count: int) -> np.ndarray:
    """Exactly `count` numbers separated by spaces, commas or brackets, and nothing else."""
    if len(text) > count * _MAX_CHARS_PER_NUMBER + 100:  # no need to scan megabytes
        raise MessageError(f"expected {count} number(s), got {len(text)} characters of text")
    text = _PREFIX.sub("", text, count=1)
    numbers = _NUMBER.findall(text)
    if _SEPARATORS.fullmatch(_NUMBER.sub(" ", text)) is None or not numbers:
        raise MessageError(f"expected {count} number(s) and nothing else, got {_excerpt(text)}")
    if len(numbers) != count:
        raise MessageError(f"expected {count} number(s), got {len(numbers)}")
    values = np.array([float(number) for number in numbers])
    if not np.all(np.isfinite(values)):
        raise MessageError("numbers must be finite (no inf or nan)")
    return values


def read_integers(text: str, count: int) -> np.ndarray:
    values = read_numbers(text, count)
    if not np.all(values == np.round(values)):
        raise MessageError("expected whole numbers")
    if np.any(np.abs(values) > _LARGEST_INTEGER):
        raise MessageError("the numbers are too large")
    return values.astype(np.int64)


def _excerpt(text: str, limit: int = 40) -> str:
    text = " ".join(text[: 4 * limit].split())  # look at the start only: replies can be huge
    text = "".join(char if char.isprintable() else "?" for char in text)
    return json.dumps(text[:limit] + ("..." if len(text) > limit else ""), ensure_ascii=False)


# -- rendering values --------------------------------------------------------------------------
def render_number(value: Any) -> str:
    if isinstance(value, (int, np.integer, bool, np.bool_)):
        return str(int(value))
    return f"{float(value):.{_SIGNIFICANT_DIGITS}g}"


def render_array(value: Any) -> str:
    """Numbers and (nested) arrays of numbers: ``0.5``, ``[1, -0.25, inf]``."""

    def nested(item: Any) -> str:
        if isinstance(item, list):
            return "[" + ", ".join(nested(element) for element in item) + "]"
        return render_number(item)

    return nested(np.asarray(value).tolist())


def _bounds_text(low: np.ndarray, high: np.ndarray) -> str:
    if np.all(low == low.flat[0]) and np.all(high == high.flat[0]):
        return f"between {render_array(low.flat[0])} and {render_array(high.flat[0])}"
    return f"between {render_array(low)} and {render_array(high)} (element by element)"


# -- one codec per space type ------------------------------------------------------------------
def _describe_discrete(space: spaces.Discrete) -> str:
    first = int(space.start)
    return f"one integer from {first} to {first + int(space.n) - 1}"


def _parse_discrete(space: spaces.Discrete, text: str) -> np.int64:
    value = int(read_integers(text, 1)[0])
    if not space.start <= value < space.start + space.n:
        raise MessageError(f"{value} is not {_describe_discrete(space)}")
    return np.int64(value)


def _describe_box(space: spaces.Box) -> str:
    count = int(np.prod(space.shape))
    kind = "integer" if np.issubdtype(space.dtype, np.integer) else "number"
    return f"{count} {kind}{'s' if count != 1 else ''} (shape {space.shape}), " + (
        _bounds_text(space.low, space.high)
    )


def _parse_box(space: spaces.Box, text: str) -> np.ndarray:
    count = int(np.prod(space.shape))
    reader = read_integers if np.issubdtype(space.dtype, np.integer) else read_numbers
    values = reader(text, count).reshape(space.shape)
    outside = (values < space.low) | (values > space.high)
    if np.any(outside):
        raise MessageError(f"{render_array(values)} is not {_bounds_text(space.low, space.high)}")
    action = values.astype(space.dtype)
    if not space.contains(action):  # float32 rounding at a bound
        action = np.clip(action, space.low, space.high).astype(space.dtype)
    return action


def _describe_multi_discrete(space: spaces.MultiDiscrete) -> str:
    return (
        f"{space.nvec.size} integers (shape {space.nvec.shape}), element i from start[i] to "
        f"start[i] + nvec[i] - 1 with start = {render_array(space.start)} and "
        f"nvec = {render_array(space.nvec)}"
    )


def _parse_multi_discrete(space: spaces.MultiDiscrete, text: str) -> np.ndarray:
    values = read_integers(text, space.nvec.size).reshape(space.nvec.shape)
    if np.any(values < space.start) or np.any(values >= space.start + space.nvec):
        raise MessageError(
            f"{render_array(values)} is out of range: {_describe_multi_discrete(space)}"
        )
    return values.astype(space.dtype)


def _describe_multi_binary(space: spaces.MultiBinary) -> str:
    return f"{int(np.prod(space.shape))} values (shape {space.shape}), each 0 or 1"


def _parse_multi_binary(space: spaces.MultiBinary, text: str) -> np.ndarray:
    values = read_integers(text, int(np.prod(space.shape))).reshape(space.shape)
    if np.any((values != 0) & (values != 1)):
        raise MessageError(f"{render_array(values)} has values other than 0 and 1")
    return values.astype(space.dtype)


def _describe_text(space: spaces.Text) -> str:
    charset = space.characters
    shown = charset if len(charset) <= 100 else charset[:100] + "..."
    return (
        f"text of {space.min_length} to {space.max_length} characters from the set "
        f"{json.dumps(shown, ensure_ascii=False)}"
    )


def _parse_text(space: spaces.Text, text: str) -> str:
    if not space.min_length <= len(text) <= space.max_length:
        raise MessageError(
            f"the text has {len(text)} characters; it must have {space.min_length} to "
            f"{space.max_length}"
        )
    strangers = sorted({char for char in text if char not in space.character_set})
    if strangers:
        raise MessageError(f"characters not allowed: {_excerpt(''.join(strangers[:20]))}")
    return text


def _render_dict(space: spaces.Dict, value: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{key}: {render(sub, value[key])}" for key, sub in space.items()) + "}"


def _describe_dict(space: spaces.Dict) -> str:
    return "a mapping: " + "; ".join(f"{key}: {describe(sub)}" for key, sub in space.items())


def _render_tuple(space: spaces.Tuple, value: Any) -> str:
    return "(" + ", ".join(render(sub, item) for sub, item in zip(space, value, strict=True)) + ")"


def _describe_tuple(space: spaces.Tuple) -> str:
    return "a tuple: " + "; ".join(f"[{i}] {describe(sub)}" for i, sub in enumerate(space))


CODECS: Mapping[type, SpaceCodec] = {
    spaces.Discrete: SpaceCodec(
        _describe_discrete, lambda space, value: str(int(value)), _parse_discrete
    ),
    spaces.Box: SpaceCodec(_describe_box, lambda space, value: render_array(value), _parse_box),
    spaces.MultiDiscrete: SpaceCodec(
        _describe_multi_discrete, lambda space, value: render_array(value), _parse_multi_discrete
    ),
    spaces.MultiBinary: SpaceCodec(
        _describe_multi_binary, lambda space, value: render_array(value), _parse_multi_binary
    ),
    spaces.Text: SpaceCodec(
        _describe_text, lambda space, value: json.dumps(value, ensure_ascii=False), _parse_text
    ),
    spaces.Dict: SpaceCodec(_describe_dict, _render_dict),
    spaces.Tuple: SpaceCodec(_describe_tuple, _render_tuple),
}
# Spaces without a codec (Graph, Sequence, custom ones) are still shown, as Python prints them.
FALLBACK = SpaceCodec(lambda space: f"values of {space}", lambda space, value: str(value))


def codec_for(space: Any) -> SpaceCodec:
    for space_type in type(space).__mro__:
        if space_type in CODECS:
            return CODECS[space_type]
    return FALLBACK


def describe(space: Any) -> str:
    return codec_for(space).describe(space)


def render(space: Any, value: Any) -> str:
    return codec_for(space).render(space, value)


def actable(space: Any) -> bool:
    return codec_for(space).parse is not None


def parse_action(space: Any, reply: str) -> Any:
    """The action a reply stands for; raises MessageError (shown to the agent) if there is none."""
    codec = codec_for(space)
    if codec.parse is None:
        raise TypeError(f"cannot read actions of {space}")
    text = action_span(reply)
    if not text.strip() and not isinstance(space, spaces.Text):
        raise MessageError("the reply was empty")
    return codec.parse(space, text if isinstance(space, spaces.Text) else text.strip())


def example_action(space: Any) -> str:
    """A valid action, written as the agent should write it (deterministic: no sampling)."""
    examples: Mapping[type, Callable[[Any], str]] = {
        spaces.Discrete: lambda s: str(int(s.start)),
        spaces.Box: lambda s: render_array(_box_example(s)),
        spaces.MultiDiscrete: lambda s: render_array(s.start),
        spaces.MultiBinary: lambda s: render_array(np.zeros(s.shape, dtype=np.int64)),
        spaces.Text: lambda s: (s.characters[:1] * max(s.min_length, 1))[: s.max_length],
    }
    for space_type in type(space).__mro__:
        if space_type in examples:
            return examples[space_type](space)
    raise TypeError(f"no example for {space}")


def _box_example(space: spaces.Box) -> np.ndarray:
    low = np.where(np.isfinite(space.low), space.low, 0.0)
    high = np.where(np.isfinite(space.high), space.high, low)
    middle = (low + high) / 2
    if np.issubdtype(space.dtype, np.integer):
        middle = np.floor(middle)
    return np.clip(middle, space.low, space.high)
