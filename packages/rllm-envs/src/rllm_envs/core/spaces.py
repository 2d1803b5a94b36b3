"""Text spaces for language environments.

Gymnasium's :class:`~gymnasium.spaces.Text` is built for small alphabets: it stores its charset
as a tuple and a dict. Language models write any Unicode character, so :class:`UnicodeText`
keeps Gymnasium's `Text` interface (so batching, flattening and shared memory in vector envs
keep working: characters are indexed by code point) over a virtual charset of every Unicode
scalar value, without materialising it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Text
from gymnasium.spaces.utils import flatten
from gymnasium.vector.utils.shared_memory import read_from_shared_memory

from rllm_envs.core import vector_text

# Unicode scalar values: every code point except the UTF-16 surrogate range, which cannot be
# encoded to UTF-8 and so can never appear in text a model produced or a tokenizer reads.
_CODE_POINTS = 0x110000
_SURROGATES = range(0xD800, 0xE000)

# What `sample()` draws from: mostly printable ASCII (so samples look like the malformed model
# output envs must tolerate), plus whitespace/control characters and arbitrary code points.
_ASCII_PRINTABLE = np.arange(0x20, 0x7F)
_CONTROL = np.array([0x00, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1B, 0x7F])


class _UnicodeCharset:
    """Set-like and sequence-like view of all Unicode scalar values, indexed by code point."""

    def __len__(self) -> int:
        return _CODE_POINTS

    def __contains__(self, char: object) -> bool:
        return isinstance(char, str) and len(char) == 1 and ord(char) not in _SURROGATES

    def __getitem__(self, index: int) -> str:
        index = int(index)
        return "" if index in _SURROGATES else chr(index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _UnicodeCharset)

    def __hash__(self) -> int:
        return hash(_UnicodeCharset)

    def __repr__(self) -> str:
        return "<unicode>"


class UnicodeText(Text):
    """A string of any Unicode scalar values, between `min_length` and `max_length` characters."""

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        # Gymnasium's constructor validates the lengths; the charset given here is replaced.
        super().__init__(max_length, min_length=min_length, charset="a", seed=seed)
        charset = _UnicodeCharset()
        self._char_set = charset  # type: ignore[assignment]
        self._char_list = charset  # type: ignore[assignment]
        self._char_index = None  # type: ignore[assignment]
        self._char_str = "<unicode>"

    def character_index(self, char: str) -> np.int32:
        return np.int32(ord(char))

    def contains(self, x: Any) -> bool:
        if not isinstance(x, str) or not self.min_length <= len(x) <= self.max_length:
            return False
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string; mostly printable ASCII, with control characters and any code point.

        Sampling is seeded by the space's own generator like every Gymnasium space. Masks over a
        charset of 1.1 million code points are not meaningful and are refused.
        """
        if mask is not None or probability is not None:
            raise NotImplementedError("UnicodeText.sample() does not support masks")
        # Favour short strings (what models write) but reach max_length now and then.
        upper = min(self.max_length, 256) if self.np_random.random() < 0.9 else self.max_length
        length = int(self.np_random.integers(self.min_length, max(upper, self.min_length) + 1))
        kinds = self.np_random.choice(3, size=length, p=[0.8, 0.1, 0.1])
        ascii_chars = self.np_random.choice(_ASCII_PRINTABLE, size=length)
        control_chars = self.np_random.choice(_CONTROL, size=length)
        any_chars = self.np_random.integers(0, _CODE_POINTS - len(_SURROGATES), size=length)
        any_chars = np.where(
            any_chars >= _SURROGATES.start, any_chars + len(_SURROGATES), any_chars
        )
        code_points = np.select([kinds == 0, kinds == 1], [ascii_chars, control_chars], any_chars)
        return "".join(map(chr, code_points.tolist()))

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __hash__(self) -> int:
        return hash((UnicodeText, self.min_length, self.max_length))


# Observations are bounded so vector envs can put them in shared memory (4 bytes a character).
DEFAULT_OBSERVATION_CHARS = 32_768
# Actions are whatever a model wrote; the bound is generous and envs accept longer text anyway.
DEFAULT_ACTION_CHARS = 1_048_576


def observation_space(max_chars: int = DEFAULT_OBSERVATION_CHARS) -> UnicodeText:
    return UnicodeText(max_chars, min_length=0)


def action_space(max_chars: int = DEFAULT_ACTION_CHARS) -> UnicodeText:
    return UnicodeText(max_chars, min_length=0)


def fit_observation(text: str, space: UnicodeText) -> str:
    """Clip an observation to the space's bound, saying so, so it always lies in the space."""
    text = text.encode("utf-8", "replace").decode("utf-8")  # drop lone surrogates
    if len(text) <= space.max_length:
        return text
    marker = f"\n[... observation clipped to {space.max_length} characters]"
    return text[: space.max_length - len(marker)] + marker


# Async vector envs keep observations in shared memory: Gymnasium's dispatch tables learn to
# write and read UnicodeText there, registered here with the class so no import of it can
# miss them.
flatten.register(UnicodeText)(vector_text.flatten_text)
read_from_shared_memory.register(UnicodeText)(vector_text.read_shared_text)


def action_text(action: Any) -> str:
    """The text of an action, whatever type a policy (or `action_space.sample()`) produced."""
    if isinstance(action, str):
        text = action
    elif isinstance(action, (bytes, bytearray)):
        text = bytes(action).decode("utf-8", "replace")
    elif action is None:
        text = ""
    else:
        text = str(action)
    # Lone surrogates cannot be encoded or tokenised; replace them rather than fail later.
    return text.encode("utf-8", "replace").decode("utf-8")
