"""`ArithmeticEnv`: single-digit addition graded on the last number of the reply."""

from __future__ import annotations

import re
import warnings
from typing import Any

from rllm_envs.core.tasks import Row, TaskSet
from rllm_envs.core.text_env import TextEnv, Transition

ENV_ID = "rllm/Arithmetic-v0"
# The id the env had while it lived in the trainer package; kept for one version.
DEPRECATED_ENV_ID = "rllm_train/Arithmetic-v0"
_INTEGER = re.compile(r"-?\d+")


def addition_tasks(max_operand: int) -> TaskSet:
    """Every (a, b) pair with 0 <= a, b <= `max_operand`, one task each."""
    rows = tuple(
        {"task_id": f"add-{a}-{b}", "a": a, "b": b}
        for a in range(max_operand + 1)
        for b in range(max_operand + 1)
    )
    return TaskSet(f"addition-0-{max_operand}", rows)


def is_held_out(a: int, b: int) -> bool:
    """One pair in five, spread over the table, is kept out of training (the test split)."""
    return (3 * a + b) % 5 == 0


def training_pairs() -> list[Row]:
    """The default table's pairs that are not held out (80 of 100)."""
    return [row for row in addition_tasks(9).rows if not is_held_out(row["a"], row["b"])]


def held_out_pairs() -> list[Row]:
    """The default table's held-out pairs (20 of 100): what validation scores."""
    return [row for row in addition_tasks(9).rows if is_held_out(row["a"], row["b"])]


def last_integer(text: str) -> str | None:
    """The last integer written in `text`, in canonical decimal form (``"-007"`` -> ``"-7"``,
    thousands separators ignored), or None.

    Kept as text: a reply may hold a number of a million digits, which ``int()`` refuses (and
    would take minutes to convert); comparing canonical text with the sum's is exact.
    """
    found = _INTEGER.findall(text.replace(",", ""))
    if not found:
        return None
    sign, digits = found[-1][:1] == "-", found[-1].lstrip("-").lstrip("0") or "0"
    return f"-{digits}" if sign and digits != "0" else digits


class ArithmeticEnv(TextEnv):
    """Single-digit addition, graded on the last number of the reply (see the package doc)."""

    metadata = {**TextEnv.metadata, "rllm.inline_safe": True}  # pure Python, microseconds a call

    def __init__(self, max_operand: int = 9, render_mode: str | None = None) -> None:
        if isinstance(max_operand, bool) or not isinstance(max_operand, int) or max_operand < 1:
            raise ValueError(f"max_operand must be an integer of at least 1, got {max_operand!r}")
        super().__init__(addition_tasks(max_operand), max_turns=1, render_mode=render_mode)

    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        return f"What is {task['a']} + {task['b']}? Reply with the number only.", {}

    def act(self, action: str) -> Transition:
        assert self.task is not None
        a, b = int(self.task["a"]), int(self.task["b"])
        answer = last_integer(action)
        correct = answer == str(a + b)
        if answer is None:
            feedback = "No number found in the reply."
        elif correct:
            feedback = "Correct."
        else:
            feedback = f"Wrong: {a} + {b} = {a + b}."
        info = {"is_correct": correct, "action_valid": answer is not None}
        return Transition(feedback, reward=float(correct), terminated=True, info=info)

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    # The task and whether it was answered - the base snapshot - are the whole episode.
    def capture_state(self) -> None:
        return None

    def restore_state(self, state: None) -> None:
        pass


class DeprecatedArithmeticEnv(ArithmeticEnv):
    """What ``rllm_train/Arithmetic-v0`` makes: the same env, with a warning naming the new id."""

    def __init__(self, max_operand: int = 9, render_mode: str | None = None) -> None:
        # stacklevel 3: past gymnasium's `make`, at the caller's `gym.make(...)` line, so
        # Python's default filters show it when that caller is the user's script.
        warnings.warn(
            f"{DEPRECATED_ENV_ID} is deprecated and will be removed in the next version; "
            f"use gym.make({ENV_ID!r}) (the same env, now in rllm-envs)",
            DeprecationWarning,
            stacklevel=3,
        )
        super().__init__(max_operand, render_mode=render_mode)
