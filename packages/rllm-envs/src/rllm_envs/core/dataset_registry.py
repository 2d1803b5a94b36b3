"""`DatasetRegistry`: named task sets saved on disk, shared by envs, `rllm-eval` and `rllm-train`.

Datasets live under ``$RLLM_DATASETS_DIR`` (default ``~/.cache/rllm/datasets``), one folder per
name and one JSONL file per split, so they are plain files a user can read and edit.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rllm_envs.core.task_set import TaskSet, read_task_file

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def datasets_dir() -> Path:
    return Path(os.environ.get("RLLM_DATASETS_DIR", "~/.cache/rllm/datasets")).expanduser()


def _split_path(name: str, split: str) -> Path:
    for part in (name, split):
        if not _NAME.match(part):
            raise ValueError(f"dataset names and splits use letters, digits, '_.-': got {part!r}")
    return datasets_dir() / name / f"{split}.jsonl"


class DatasetRegistry:
    """Save and load named task sets (all methods are class methods; the state is on disk)."""

    @classmethod
    def register_dataset(
        cls, name: str, data: Iterable[Mapping[str, Any]], split: str = "train"
    ) -> TaskSet:
        path = _split_path(name, split)
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [dict(row) for row in data]
        temporary = path.with_suffix(".jsonl.tmp")
        with temporary.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        temporary.replace(path)  # atomic: readers never see half a file
        return TaskSet(f"registry:{name}/{split}", tuple(rows))

    @classmethod
    def load_dataset(cls, name: str, split: str = "train") -> TaskSet:
        path = _split_path(name, split)
        if not path.exists():
            known = cls.get_dataset_splits(name)
            hint = f"; it has splits {known}" if known else "; register it first"
            raise KeyError(f"dataset {name!r} has no split {split!r}{hint}")
        return TaskSet(f"registry:{name}/{split}", tuple(read_task_file(path)))

    @classmethod
    def dataset_exists(cls, name: str, split: str | None = None) -> bool:
        if split is None:
            return bool(cls.get_dataset_splits(name))
        return _split_path(name, split).exists()

    @classmethod
    def get_dataset_splits(cls, name: str) -> list[str]:
        folder = datasets_dir() / name
        return sorted(path.stem for path in folder.glob("*.jsonl")) if folder.is_dir() else []

    @classmethod
    def get_dataset_names(cls) -> list[str]:
        root = datasets_dir()
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    @classmethod
    def remove_dataset(cls, name: str) -> None:
        folder = datasets_dir() / name
        for path in folder.glob("*.jsonl"):
            path.unlink()
        if folder.is_dir():
            folder.rmdir()
