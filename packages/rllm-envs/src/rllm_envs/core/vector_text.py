"""Text observations in the shared memory of Gymnasium's `AsyncVectorEnv`.

Gymnasium reads an async vector env's shared memory once, when the vector env is built, and
hands out copies of that object after every reset and step. For numpy spaces the object is a
view of the memory, so the copies are current; for `Text` it is a tuple of strings, frozen at
build time (all NUL characters). Here a :class:`UnicodeText` batch is a live view instead:
copying it (what the vector env does with ``copy=True``, the default) reads the strings as they
are now. Writing is vectorised too (one UTF-32 encode instead of a Python loop a character).

The functions here work for :class:`~rllm_envs.core.spaces.UnicodeText`, whose characters are
indexed by code point; :mod:`rllm_envs.core.spaces` registers them with Gymnasium for it, where
the class is defined (so this module needs nothing from that one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Text


class SharedTextBatch(Sequence):
    """The strings of `count` envs in one shared-memory block, read on access."""

    def __init__(self, space: Text, shared_memory: Any, count: int) -> None:
        self.space = space
        self.shared_memory = shared_memory
        self.count = count

    def read(self) -> tuple[str, ...]:
        codes = np.frombuffer(self.shared_memory.get_obj(), dtype=np.int32)
        codes = codes.reshape((self.count, self.space.max_length))
        padding = len(self.space.character_set)
        return tuple(_decode(row[row < padding]) for row in codes)

    def __getitem__(self, index):  # type: ignore[override]
        return self.read()[index]

    def __iter__(self):
        return iter(self.read())

    def __len__(self) -> int:
        return self.count

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return self.read()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTextBatch({self.read()!r})"


def _decode(codes: np.ndarray) -> str:
    return codes.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")


def read_shared_text(space: Text, shared_memory: Any, n: int = 1) -> SharedTextBatch:
    """Gymnasium's `read_from_shared_memory` for the space: a live view of the `n` strings."""
    return SharedTextBatch(space, shared_memory, n)


def flatten_text(space: Text, x: str) -> np.ndarray:
    """Gymnasium's `flatten` for the space: code points, padded with the charset's length."""
    codes = np.frombuffer(x.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int32)
    if len(codes) > space.max_length:
        raise ValueError(f"text of {len(codes)} characters does not fit {space}")
    flat = np.full(space.max_length, len(space.character_set), dtype=np.int32)
    flat[: len(codes)] = codes
    return flat
