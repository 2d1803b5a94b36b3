"""The registry knows every shipped task set with no set-up step, and takes user sets from
lists, files, DataFrames and HF datasets; task sets repeat for pass@k."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_envs import DatasetRegistry, TaskSet, resolve_dataset
from rllm_envs.arithmetic import held_out_pairs, training_pairs
from rllm_envs.core.shipped_datasets import (
    SHIPPED_DATASETS,
    held_out_split,
    held_out_tasks_argument,
)

from tests.parts import require_module

SHIPPED = {
    "gsm8k": ["test", "train"],
    "math": ["test", "train"],
    "humaneval": ["test"],
    "mbpp": ["stdio", "test"],
    "frozenlake": ["test", "train"],
    "mcp_retrieval": ["test", "train"],
    "swe": ["test", "train"],
    "arithmetic": ["test", "train"],
    "solver_judge": ["test", "train"],
}


def test_every_shipped_set_loads_by_name_and_split():
    assert set(SHIPPED) <= set(DatasetRegistry.get_dataset_names())
    for name, splits in SHIPPED.items():
        assert DatasetRegistry.get_dataset_splits(name) == splits
        for split in splits:
            task_set = DatasetRegistry.load_dataset(name, split)
            assert len(task_set) > 0 and all(isinstance(row, dict) for row in task_set)


@pytest.mark.parametrize("name", ["gsm8k", "frozenlake", "arithmetic"])
def test_shipped_rows_play_in_their_env(name):
    entry = SHIPPED_DATASETS[name]
    row = DatasetRegistry.load_dataset(name, "test")[0]
    env = gym.make(entry.env_id)
    try:
        _, info = env.reset(seed=0, options={"task": row})
        assert info["task_id"]
    finally:
        env.close()


@pytest.mark.parametrize("name", ["gsm8k", "frozenlake", "mcp_retrieval"])
def test_the_test_tasks_argument_makes_the_env_play_its_test_split(name):
    """What rllm-eval passes when no split is given: the env's own test rows."""
    entry = SHIPPED_DATASETS[name]
    env = gym.make(entry.env_id, tasks=held_out_tasks_argument(entry.env_id))
    try:
        played = [dict(row) for row in env.unwrapped.tasks]
    finally:
        env.close()
    assert played == [dict(row) for row in DatasetRegistry.load_dataset(name, "test")]
    assert held_out_tasks_argument("rllm/Arithmetic-v0") is None  # made by a rule: its own default


def test_arithmetic_split_holds_pairs_out():
    train = {row["task_id"] for row in training_pairs()}
    test = {row["task_id"] for row in held_out_pairs()}
    assert len(train) == 80 and len(test) == 20 and not train & test
    assert held_out_split("rllm/Arithmetic-v0") == ("arithmetic", "test")
    assert held_out_split("rllm/FrozenLake-v0") == ("frozenlake", "test")
    assert held_out_split("rllm/Code-v0") is None  # no train split beside the test one


def test_register_from_list_file_pandas_and_hf(tmp_path):
    rows = [{"question": "1+1", "answer": "2"}, {"question": "2+2", "answer": "4"}]
    assert DatasetRegistry.register_dataset("mine", rows).rows == tuple(rows)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert DatasetRegistry.register_dataset("mine", str(path), "file").rows == tuple(rows)
    pandas = require_module("pandas", "pandas comes with rllm-envs[datasets]")
    frame = pandas.DataFrame(rows + [{"question": "3+3", "answer": "6"}])
    assert len(DatasetRegistry.register_dataset("mine", frame, "frame")) == 3
    datasets = require_module("datasets", "datasets comes with rllm-envs[datasets]")
    hf = datasets.Dataset.from_list(rows)
    assert DatasetRegistry.register_dataset("mine", hf, "hf").rows == tuple(rows)
    assert DatasetRegistry.get_dataset_splits("mine") == ["file", "frame", "hf", "train"]
    assert resolve_dataset("mine:frame")[2] == {"question": "3+3", "answer": "6"}
    assert resolve_dataset(str(path)).rows == tuple(rows)
    DatasetRegistry.remove_dataset("mine")
    assert not DatasetRegistry.dataset_exists("mine")


def test_repeat_for_pass_at_k():
    task_set = TaskSet("t", ({"id": 1}, {"id": 2}))
    repeated = task_set.repeat(n=3)
    assert [row["id"] for row in repeated] == [1, 1, 1, 2, 2, 2]
    with pytest.raises(ValueError):
        task_set.repeat(0)
