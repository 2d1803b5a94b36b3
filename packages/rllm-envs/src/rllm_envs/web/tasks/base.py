"""What a task family is: a seeded instance generator, a validator and a scripted solution.

An :class:`Instance` keeps what the page may show (``public``, sent to the browser) apart from
what the validator compares (``expected``, which never leaves the env). The solution is a list
of :class:`Step` s naming elements by role and accessible name, so a scripted solver can play
it through the real action grammar (which proves the task is solvable and the validator right).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Step:
    """One scripted action: `verb` on the element with this role and name, with `text`."""

    verb: str
    role: str | None = None
    name: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class Instance:
    goal: str
    public: dict[str, Any]
    expected: dict[str, Any]
    solution: tuple[Step, ...]


def default_check(
    expected: Mapping[str, Any], state: Mapping[str, Any], answer: str | None
) -> bool:
    """Expected ``answer`` matches the given answer; every ``state`` entry matches the app's."""
    if "answer" in expected and (
        answer is None or normalize(answer) != normalize(expected["answer"])
    ):
        return False
    return all(state.get(key) == value for key, value in expected.get("state", {}).items())


@dataclass(frozen=True)
class Family:
    name: str
    title: str  # the page title, also the docs' display name
    summary: str  # one line for the docs
    generate: Callable[[random.Random], Instance]
    check: Callable[[Mapping[str, Any], Mapping[str, Any], str | None], bool] = field(
        default=default_check
    )

    def instance(self, seed: int) -> Instance:
        # A string seed is hashed with SHA-512 by `random`: stable across runs and processes.
        return self.generate(random.Random(f"{self.name}:{seed}"))


_EDGE_PUNCTUATION = " \t\n\"'`.,;:!?"


def normalize(text: str) -> str:
    """Case, surrounding quotes/punctuation and repeated spaces do not matter in answers."""
    return re.sub(r"\s+", " ", str(text)).strip(_EDGE_PUNCTUATION).casefold()


def pick(rng: random.Random, pool: tuple[str, ...], count: int) -> list[str]:
    return rng.sample(pool, count)


def answer_step(value: Any) -> tuple[Step, ...]:
    return (Step("answer", text=str(value)),)
