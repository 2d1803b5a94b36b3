"""Which task rows a run trains and validates on (``data.train`` / ``data.val``).

Rows come from rllm_envs' ``DatasetRegistry`` (``"name:split"``) or a task file, and each is
played with ``env.reset(options={"task": row})``. Where nothing is named and the env has a
shipped train/test pair (``rllm/Arithmetic-v0``, ``rllm/Math-v0``, ``rllm/FrozenLake-v0``,
``rllm/MCP-v0``, ``rllm/SWE-v0``), training uses the train split and validation the held-out
test split - unless ``env.kwargs`` chooses the env's tasks itself, whose rows those splits
would not match. Otherwise the env draws its own tasks from the step's seeds, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from rllm_envs import resolve_dataset
from rllm_envs.core.shipped_datasets import TASK_CHOOSING_KWARGS, held_out_split
from rllm_envs.core.task_set import Row, TaskSet

from rllm_train.config import ConfigError, TrainConfig

TASK_STREAM = 11  # draws training rows apart from the task seeds


@dataclass(frozen=True)
class RunData:
    train: TaskSet | None = None  # None: the env draws tasks from seeds
    val: TaskSet | None = None  # None: validation seeds (only with val_every/val_before_train)


def _load(spec: str, key: str) -> TaskSet:
    try:
        return resolve_dataset(spec)
    except (KeyError, ValueError, FileNotFoundError) as error:
        raise ConfigError(f"{key}: {error}") from error


def default_splits(env_id: str, env_kwargs: Mapping[str, Any]) -> tuple[str, str] | None:
    """("name:train", "name:test") for an env with a shipped pair and no task choice."""
    if TASK_CHOOSING_KWARGS & set(env_kwargs):
        return None
    found = held_out_split(env_id)
    return (f"{found[0]}:train", f"{found[0]}:test") if found else None


def run_data(config: TrainConfig) -> RunData:
    """The run's training and validation rows (see the module docstring)."""
    data = config.data
    defaults = None if config.env.entry_point else default_splits(config.env.id, config.env.kwargs)
    train_spec = data.train or (defaults[0] if defaults else "")
    val_spec = data.val or (defaults[1] if defaults else "")
    return RunData(
        train=_load(train_spec, "data.train") if train_spec else None,
        val=_load(val_spec, "data.val") if val_spec else None,
    )


def step_row_indices(size: int, run_seed: int, step: int, count: int) -> list[int]:
    """The indices, among `size` rows, of training step `step`'s rows: fixed by the run seed
    and the step (resumable); distinct unless the step wants more rows than there are."""
    generator = np.random.default_rng([run_seed, step, TASK_STREAM])
    return [int(i) for i in generator.choice(size, size=count, replace=count > size)]


def step_rows(rows: TaskSet, run_seed: int, step: int, count: int) -> list[Row]:
    """The rows of training step `step` (the uniform draw; see step_row_indices)."""
    return [rows[index] for index in step_row_indices(len(rows), run_seed, step, count)]


def validation_rows(rows: TaskSet, count: int) -> list[Row]:
    """The first `count` rows of the validation set (all of them with count 0)."""
    return list(rows)[: count or len(rows)]
