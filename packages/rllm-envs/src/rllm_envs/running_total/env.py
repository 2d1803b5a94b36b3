"""`RunningTotalEnv`: keep a running total over several turns, told the true total after each."""

from __future__ import annotations

import itertools
import random
from typing import Any

from rllm_envs.arithmetic import last_integer
from rllm_envs.core.tasks import Row, TaskSet
from rllm_envs.core.text_env import TextEnv, Transition

ENV_ID = "rllm/RunningTotal-v0"
# The shipped splits are drawn from the full table with this seed: fixed rows, so a run's
# validation tasks never change and never appear in its training rows.
_SPLIT_SEED = 20261130
_TRAIN_ROWS = 256
_TEST_ROWS = 32


def running_total_tasks(additions: int = 3, max_start: int = 9, max_add: int = 9) -> TaskSet:
    """Every task of the table: a start in 1..max_start and `additions` addends in 2..max_add.

    Addends of 0 and 1 are left out: adding them is too easy to tell a total apart from a start.
    """
    _check_arguments(additions, max_start, max_add)
    rows = tuple(
        {
            "task_id": "total-" + "-".join(map(str, (start, *addends))),
            "start": start,
            "addends": list(addends),
        }
        for start in range(1, max_start + 1)
        for addends in itertools.product(range(2, max_add + 1), repeat=additions)
    )
    return TaskSet(f"running-total-{additions}x{max_start}-{max_add}", rows)


def _shipped_split() -> tuple[list[Row], list[Row]]:
    rows = list(running_total_tasks().rows)
    random.Random(_SPLIT_SEED).shuffle(rows)
    return rows[_TEST_ROWS : _TEST_ROWS + _TRAIN_ROWS], rows[:_TEST_ROWS]


def training_tasks() -> list[Row]:
    """The `running_total` dataset's train split: 256 fixed tasks of the default table."""
    return _shipped_split()[0]


def held_out_tasks() -> list[Row]:
    """Its test split: 32 other tasks, never in the train split (what validation scores)."""
    return _shipped_split()[1]


def _check_arguments(additions: int, max_start: int, max_add: int) -> None:
    for name, value, least in (
        ("additions", additions, 1),
        ("max_start", max_start, 1),
        ("max_add", max_add, 2),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")


class RunningTotalEnv(TextEnv):
    """A running total kept over one turn per addend (see the package doc)."""

    metadata = {**TextEnv.metadata, "rllm.inline_safe": True}  # pure Python, microseconds a call

    def __init__(
        self,
        additions: int = 3,
        max_start: int = 9,
        max_add: int = 9,
        tasks: str | list[Row] = "all",
        render_mode: str | None = None,
    ) -> None:
        table = running_total_tasks(additions, max_start, max_add)
        super().__init__(_chosen(table, tasks), max_turns=additions, render_mode=render_mode)
        self.total = 0
        self.correct_turns = 0

    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        start, addends = _task_numbers(task)
        self.total, self.correct_turns = start, 0
        return f"Start with {start}. Add {addends[0]}. Reply with the total only.", {}

    def act(self, action: str) -> Transition:
        assert self.task is not None
        _, addends = _task_numbers(self.task)
        self.total += addends[self.turn - 1]
        answer = last_integer(action)
        correct = answer == str(self.total)
        self.correct_turns += correct
        verdict = "Correct" if correct else "Wrong" if answer is not None else "No number found"
        done = self.turn >= len(addends)
        follow = "" if done else f" Add {addends[self.turn]}."
        info: dict[str, Any] = {"action_valid": answer is not None, "turn_correct": correct}
        if done:
            info["is_correct"] = self.correct_turns == len(addends)
        # Each right total earns 1/len(addends): an episode's return is its share of right totals.
        return Transition(
            f"{verdict}: the total is {self.total}.{follow}",
            reward=float(correct) / len(addends),
            terminated=done,
            info=info,
        )

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    def capture_state(self) -> tuple[int, int]:
        return self.total, self.correct_turns

    def restore_state(self, state: tuple[int, int]) -> None:
        self.total, self.correct_turns = state


# What `tasks=` may name besides rows of one's own: the whole table or a shipped split.
SPLITS = {"train": training_tasks, "test": held_out_tasks}


def _chosen(table: TaskSet, tasks: str | list[Row]) -> TaskSet:
    """The task set `tasks` names: "all" (the table), "train"/"test" (the shipped splits of
    the default table, also as "shipped:train"/"shipped:test") or a list of rows."""
    if isinstance(tasks, list):
        return TaskSet("running-total-given", tuple(dict(row) for row in tasks))
    if tasks == "all":
        return table
    split = tasks.removeprefix("shipped:") if isinstance(tasks, str) else None
    if split in SPLITS:
        return TaskSet(f"running-total-{split}", tuple(SPLITS[split]()))
    raise ValueError(f"tasks must be 'all', 'train', 'test' or a list of rows, got {tasks!r}")


def _task_numbers(task: Row) -> tuple[int, list[int]]:
    """The start and addends of a task row, checked (a row may come from a user's file)."""
    start, addends = task.get("start"), task.get("addends")
    if (
        not isinstance(start, int)
        or not isinstance(addends, list)
        or not addends
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in addends)
    ):
        raise ValueError(f"a running-total task needs 'start' (int) and 'addends' (ints): {task!r}")
    return start, addends
