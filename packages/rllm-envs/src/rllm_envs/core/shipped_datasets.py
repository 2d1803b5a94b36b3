"""The task sets rllm-envs ships, by dataset name and split, for :class:`DatasetRegistry`.

Each split names where its rows come from: a JSONL file inside the ``rllm_envs`` package, or a
``"module:function"`` that returns the rows (for sets made by a rule, such as the arithmetic
split). ``env_id`` is the env that plays the rows (``reset(options={"task": row})``), which is
how a trainer finds an env's held-out split when no validation set is named.

Nothing here is read until a split is loaded; the table itself is constant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from rllm_envs.core.loading import load_attr
from rllm_envs.core.task_set import Row, read_task_file

PACKAGE_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ShippedDataset:
    name: str
    env_id: str
    splits: Mapping[str, str]  # split -> package-relative file, or "module:function"
    # The env's `tasks=` value that plays the test split, where the split is made by a rule
    # (a file split is played as "shipped:<file stem>"); None: the env cannot be told.
    test_tasks_argument: str | None = None


def _files(folder: str, **splits: str) -> Mapping[str, str]:
    return MappingProxyType({split: f"{folder}/{file}" for split, file in splits.items()})


SHIPPED_DATASETS: Mapping[str, ShippedDataset] = MappingProxyType(
    {
        entry.name: entry
        for entry in (
            ShippedDataset(
                "arithmetic",
                "rllm/Arithmetic-v0",
                MappingProxyType(
                    {
                        "train": "rllm_envs.arithmetic.env:training_pairs",
                        "test": "rllm_envs.arithmetic.env:held_out_pairs",
                    }
                ),
            ),
            ShippedDataset(
                "running_total",
                "rllm/RunningTotal-v0",
                MappingProxyType(
                    {
                        "train": "rllm_envs.running_total.env:training_tasks",
                        "test": "rllm_envs.running_total.env:held_out_tasks",
                    }
                ),
                test_tasks_argument="shipped:test",
            ),
            ShippedDataset(
                "gsm8k",
                "rllm/Math-v0",
                _files("math/data", train="gsm8k_train.jsonl", test="gsm8k_test.jsonl"),
            ),
            ShippedDataset(
                "math",
                "rllm/Math-v0",
                _files("math/data", train="math_train.jsonl", test="math_test.jsonl"),
            ),
            ShippedDataset(
                "humaneval", "rllm/Code-v0", _files("code/data", test="humaneval.jsonl")
            ),
            ShippedDataset(
                "mbpp",
                "rllm/Code-v0",
                _files("code/data", test="mbpp.jsonl", stdio="mbpp_stdio.jsonl"),
            ),
            ShippedDataset(
                "frozenlake",
                "rllm/FrozenLake-v0",
                _files("frozenlake/data", train="train.jsonl", test="test.jsonl"),
            ),
            ShippedDataset(
                "mcp_retrieval",
                "rllm/MCP-v0",
                _files("mcp/retrieval/data", train="train.jsonl", test="test.jsonl"),
            ),
            ShippedDataset(
                "swe", "rllm/SWE-v0", _files("swe/data", train="train.jsonl", test="test.jsonl")
            ),
            # Harbor task folders shipped with rllm/Harbor-v0 (rows name each task's folder).
            ShippedDataset(
                "harbor",
                "rllm/Harbor-v0",
                MappingProxyType({"test": "rllm_envs.harbor.task_folder:shipped_task_rows"}),
            ),
            # The multi-agent solver-judge game plays the GSM8K rows (PettingZoo module id).
            ShippedDataset(
                "solver_judge",
                "solver_judge_v0",
                _files("math/data", train="gsm8k_train.jsonl", test="gsm8k_test.jsonl"),
            ),
        )
    }
)


def load_shipped(name: str, split: str) -> list[Row]:
    """The rows of a shipped split (KeyError when the name or split is not shipped)."""
    source = SHIPPED_DATASETS[name].splits[split]
    if ":" in source:
        return [dict(row) for row in load_attr(source, what=f"shipped split {name}:{split}")()]
    return read_task_file(PACKAGE_DIR / source)


# An env's keyword arguments that pick its tasks: with one of them given, the shipped splits
# do not apply (neither as a trainer's held-out set nor as an evaluation's default).
TASK_CHOOSING_KWARGS = frozenset({"tasks", "dataset", "split", "column_map", "max_operand"})


def held_out_tasks_argument(env_id: str) -> str | None:
    """The ``tasks=`` argument that makes `env_id` play its shipped test split (an evaluation
    scores held-out rows unless told otherwise), or None where it ships no file for one."""
    bare_id = env_id.rpartition(":")[2]
    for entry in SHIPPED_DATASETS.values():
        source = entry.splits.get("test", "")
        if entry.env_id == bare_id and source.endswith(".jsonl"):
            return f"shipped:{Path(source).stem}"
        if entry.env_id == bare_id and entry.test_tasks_argument:
            return entry.test_tasks_argument
    return None


def held_out_split(env_id: str) -> tuple[str, str] | None:
    """(dataset, "test") of the first shipped dataset played by `env_id` that has a test split
    and a train split beside it, else None."""
    bare_id = env_id.rpartition(":")[2]
    for entry in SHIPPED_DATASETS.values():
        if entry.env_id == bare_id and {"train", "test"} <= set(entry.splits):
            return entry.name, "test"
    return None
