"""`DatasetRegistry`: named task sets by name and split, shared by envs, `rllm-eval` and
`rllm-train`.

Two sources, one lookup:

* the sets rllm-envs ships (:mod:`rllm_envs.core.shipped_datasets`: ``gsm8k``, ``math``,
  ``humaneval``, ``mbpp``, ``frozenlake``, ``mcp_retrieval``, ``swe``, ``solver_judge``,
  ``arithmetic``, ``running_total``, ``harbor``), known with no set-up step;
* sets a user registers, saved under ``$RLLM_DATASETS_DIR`` (default
  ``~/.cache/rllm/datasets``), one folder per name and one JSONL file per split. They persist
  across processes (register once, train from any script or ``rllm-train data.train=name:split``,
  as one would expect from a registry) and are plain files a user can read and edit. A user set
  of the same name and split as a shipped one is the one loaded.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rllm_envs.core.shipped_datasets import SHIPPED_DATASETS, load_shipped
from rllm_envs.core.task_set import Row, TaskSet, read_task_file

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def datasets_dir() -> Path:
    return Path(os.environ.get("RLLM_DATASETS_DIR", "~/.cache/rllm/datasets")).expanduser()


def _split_path(name: str, split: str) -> Path:
    for part in (name, split):
        if not _NAME.match(part):
            raise ValueError(f"dataset names and splits use letters, digits, '_.-': got {part!r}")
    return datasets_dir() / name / f"{split}.jsonl"


def _is_folder(data: Any) -> bool:
    return isinstance(data, (str, Path)) and Path(data).expanduser().is_dir()


def _harbor_rows(folder: str | Path) -> list[Row]:
    # Harbor task folders (rllm/Harbor-v0): one row per task, naming its folder.
    from rllm_envs.harbor.task_folder import task_rows

    return list(task_rows(folder))


def _is_file_name(data: Any) -> bool:
    return isinstance(data, (str, Path))


def _is_data_frame(data: Any) -> bool:
    return hasattr(data, "to_dict") and hasattr(data, "columns")  # pandas.DataFrame


def _is_hf_dataset(data: Any) -> bool:
    return hasattr(data, "to_list") and hasattr(data, "features")  # datasets.Dataset


# What `register_dataset` accepts, tried in order: how to read rows out of each kind.
ROW_READERS: tuple[tuple[Callable[[Any], bool], Callable[[Any], Iterable[Mapping]]], ...] = (
    (_is_folder, _harbor_rows),
    (_is_file_name, read_task_file),
    (lambda data: isinstance(data, TaskSet), lambda data: data.rows),
    (_is_data_frame, lambda frame: frame.to_dict(orient="records")),
    (_is_hf_dataset, lambda dataset: dataset.to_list()),
)


def rows_of(data: Any) -> list[Row]:
    """Rows from a list of dicts, a task file, a folder of Harbor tasks, a TaskSet, a pandas
    DataFrame or a HF Dataset."""
    for accepts, read in ROW_READERS:
        if accepts(data):
            return [dict(row) for row in read(data)]
    return [dict(row) for row in data]


def _plain(value: Any) -> Any:
    # numpy scalars and arrays (pandas, datasets) -> Python values, so rows stay JSON
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


class DatasetRegistry:
    """Register and load named task sets (class methods; shipped sets are constant, user sets
    live on disk, so there is no state in the process)."""

    @classmethod
    def register_dataset(cls, name: str, data: Any, split: str = "train") -> TaskSet:
        """Save `data` (rows, a file path, a TaskSet, a DataFrame or a HF Dataset) as
        `name`/`split` and return it as a TaskSet."""
        path = _split_path(name, split)
        rows = rows_of(data)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".jsonl.tmp")
        with temporary.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False, default=_plain) + "\n")
        temporary.replace(path)  # atomic: readers never see half a file
        return cls.load_dataset(name, split)

    @classmethod
    def load_dataset(cls, name: str, split: str = "train") -> TaskSet:
        path = _split_path(name, split)
        if path.exists():
            rows = read_task_file(path)
        elif split in cls._shipped_splits(name):
            rows = load_shipped(name, split)
        else:
            known = cls.get_dataset_splits(name)
            hint = f"; it has splits {known}" if known else f"; known: {cls.get_dataset_names()}"
            raise KeyError(f"dataset {name!r} has no split {split!r}{hint}")
        return TaskSet(f"registry:{name}/{split}", tuple(rows))

    @classmethod
    def dataset_exists(cls, name: str, split: str | None = None) -> bool:
        splits = cls.get_dataset_splits(name)
        return bool(splits) if split is None else split in splits

    @classmethod
    def get_dataset_splits(cls, name: str) -> list[str]:
        folder = datasets_dir() / name
        user = {path.stem for path in folder.glob("*.jsonl")} if folder.is_dir() else set()
        return sorted(user | set(cls._shipped_splits(name)))

    @classmethod
    def get_dataset_names(cls) -> list[str]:
        root = datasets_dir()
        user = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
        return sorted(user | set(SHIPPED_DATASETS))

    @classmethod
    def remove_dataset(cls, name: str) -> None:
        """Forget a user-registered set (the shipped sets cannot be removed)."""
        folder = datasets_dir() / name
        for path in folder.glob("*.jsonl"):
            path.unlink()
        if folder.is_dir():
            folder.rmdir()

    @staticmethod
    def _shipped_splits(name: str) -> Mapping[str, str]:
        entry = SHIPPED_DATASETS.get(name)
        return entry.splits if entry is not None else {}


def resolve_dataset(spec: str) -> TaskSet:
    """``"name:split"`` (or ``"name"``, the train split) from the registry, or a task file."""
    if Path(spec).expanduser().suffix.lower() in (".jsonl", ".json", ".parquet"):
        return TaskSet(spec, tuple(read_task_file(spec)))
    name, _, split = spec.partition(":")
    return DatasetRegistry.load_dataset(name, split or "train")
