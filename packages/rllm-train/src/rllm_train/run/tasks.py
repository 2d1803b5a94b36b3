"""Which tasks a run plays, with which env seeds: one plan, whichever backend plays it.

A training step's tasks come from the run's curriculum (:mod:`~rllm_train.run.curriculum`:
the uniform draw fixed by the run seed and the step, or a weighted one on the native backend),
each with the env seed its episodes reset with. Validation plays the first ``trainer.val_tasks``
held-out rows, or that many seeds of a stream of their own. The native trainer plays these
step by step; the verl backend writes the same tasks, in the same order, as its data rows
(:func:`training_draws`), so its data loader hands each step the tasks native would play.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllm_train.datasets import RunData, validation_rows
from rllm_train.run.curriculum import Curriculum, step_task_seeds

VALIDATION_STREAM = 1_000_003  # seeds validation tasks apart from training ones
SAMPLING_STREAM = 7  # seeds the model's draws apart from the task draws


def validation_seeds(run_seed: int, count: int) -> list[int]:
    return step_task_seeds(run_seed, VALIDATION_STREAM, count)


def step_sampling_seed(run_seed: int, step: int) -> int:
    """The sampling seed of step `step`: each model request's seed derives from it."""
    state = np.random.SeedSequence([run_seed, step, SAMPLING_STREAM]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


@dataclass(frozen=True)
class TaskDraw:
    """One task as an episode plays it: the env's reset seed and, with task rows, the row
    (``reset(seed=seed, options={"task": row})``)."""

    seed: int
    row: dict[str, Any] | None = None


def draws(seeds: Sequence[int], rows: Sequence[Any] | None) -> list[TaskDraw]:
    if rows is None:
        return [TaskDraw(seed) for seed in seeds]
    return [TaskDraw(seed, dict(row)) for seed, row in zip(seeds, rows, strict=True)]


def validation_draws(run_seed: int, val_tasks: int, data: RunData) -> list[TaskDraw]:
    """The validation tasks: the first `val_tasks` held-out rows, else `val_tasks` seeds."""
    rows = validation_rows(data.val, val_tasks) if data.val is not None else None
    count = len(rows) if rows is not None else val_tasks
    return draws(validation_seeds(run_seed, count), rows)


def training_draws(curriculum: Curriculum, steps: int) -> list[TaskDraw]:
    """Every training step's tasks (one entry per task, before the samples of each), step
    after step: what a run that cannot steer its curriculum plays, planned up front."""
    planned = []
    for step in range(steps):
        plan = curriculum.plan(step)
        planned.extend(draws(plan.seeds, plan.rows))
    return planned
