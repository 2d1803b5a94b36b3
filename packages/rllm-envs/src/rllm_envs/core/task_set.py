"""`TaskSet`, the rows an environment draws its episodes from, and the task files they are
read from (JSON lines, JSON, Parquet).

A task is a plain JSON-able dict (a "row"). Where rows come from by name (``shipped:``,
``hf:``, ``registry:`` or a path) is resolved by :mod:`rllm_envs.core.tasks`; this module is
the part both that and :mod:`rllm_envs.core.dataset_registry` build on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rllm_envs.core.json_lines import whole_objects

Row = dict[str, Any]


@dataclass(frozen=True)
class TaskSet:
    """An immutable, ordered collection of task rows."""

    name: str
    rows: tuple[Row, ...]

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError(f"task set {self.name!r} is empty")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Row:
        # A copy, like `draw`: rows may be shared by every env made from the same source.
        return dict(self.rows[index])

    def __iter__(self) -> Iterator[Row]:
        return (dict(row) for row in self.rows)

    def draw(self, rng: np.random.Generator) -> Row:
        """A row chosen uniformly with the caller's generator (the env's `np_random`)."""
        return dict(self.rows[int(rng.integers(len(self.rows)))])

    def take(self, count: int) -> TaskSet:
        return TaskSet(f"{self.name}[:{count}]", self.rows[:count])

    def repeat(self, n: int) -> TaskSet:
        """Each row `n` times in a row (n samples per task, for pass@k)."""
        if n < 1:
            raise ValueError(f"repeat needs n >= 1, got {n}")
        return TaskSet(f"{self.name}x{n}", tuple(row for row in self.rows for _ in range(n)))

    def to_list(self) -> list[Row]:
        return list(self)


def _read_jsonl(path: Path) -> list[Row]:
    # A task file is written by hand: a last line cut short is a mistake like any other.
    return [row for _, row in whole_objects(path, skip_cut_short=False)]


def _read_json(path: Path) -> list[Row]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of task objects")
    return data


def _read_parquet(path: Path) -> list[Row]:
    try:
        import pyarrow.parquet as parquet
    except ImportError as error:
        raise ImportError(
            "reading Parquet task files needs pyarrow: pip install pyarrow"
        ) from error
    return parquet.read_table(path).to_pylist()


FILE_READERS: Mapping[str, Callable[[Path], list[Row]]] = {
    ".jsonl": _read_jsonl,
    ".json": _read_json,
    ".parquet": _read_parquet,
}


def read_task_file(path: str | Path) -> list[Row]:
    path = Path(path).expanduser()
    reader = FILE_READERS.get(path.suffix.lower())
    if reader is None:
        raise ValueError(f"{path}: unknown task file type; use one of {sorted(FILE_READERS)}")
    if not path.is_file():
        raise FileNotFoundError(f"task file not found: {path}")
    return reader(path)
