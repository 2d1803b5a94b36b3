"""Task sets: the rows an environment draws its episodes from.

A task is a plain JSON-able dict (a "row"). An environment is bound to a :class:`TaskSet`;
``reset(seed=...)`` draws a row with the env's seeded generator, and
``reset(options={"task": row})`` runs an explicit row instead.

Where rows come from is named by a *source* string, resolved through a table of loaders:

===========================  ===================================================
``shipped:<name>``           a JSONL file shipped inside an env package
``path/to/file.jsonl``       a JSON-lines file (also ``.json``, ``.parquet``)
``hf:<dataset>[:<config>]``  a Hugging Face ``datasets`` dataset (local or cached)
``registry:<name>``          a dataset saved with :class:`~rllm_envs.DatasetRegistry`
===========================  ===================================================

A ``column_map`` renames the source's columns to the names the env reads, e.g.
``{"problem": "question", "solution": "answer"}``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm_envs.core.dataset_registry import DatasetRegistry
from rllm_envs.core.task_set import FILE_READERS, Row, TaskSet, read_task_file

# TaskSet, Row and the file readers live in task_set (the dataset registry builds on them too);
# they are part of this module's interface as well.
__all__ = [
    "FILE_READERS",
    "Row",
    "TaskSet",
    "TaskSources",
    "check_columns",
    "read_task_file",
    "rename_columns",
    "task_id",
]


def _load_hf(spec: str, split: str) -> list[Row]:
    try:
        import datasets
    except ImportError as error:
        raise ImportError(
            "loading Hugging Face datasets needs the 'datasets' extra: "
            "pip install 'rllm-envs[datasets]'"
        ) from error
    if (Path(spec).expanduser() / "state.json").is_file():
        # A single Dataset written with `save_to_disk`, which `load_dataset` refuses to read.
        return list(datasets.load_from_disk(str(Path(spec).expanduser())))
    name, _, config = spec.partition(":")
    return list(datasets.load_dataset(name, config or None, split=split))


def _load_registry(name: str, split: str) -> list[Row]:
    return list(DatasetRegistry.load_dataset(name, split).rows)


@dataclass(frozen=True)
class TaskSources:
    """Resolves source strings to rows. `shipped` maps a shipped set's name to its file."""

    shipped: Mapping[str, Path] = field(default_factory=dict)

    def load(
        self,
        source: str | Path | Sequence[Row] | TaskSet,
        *,
        split: str = "train",
        column_map: Mapping[str, str] | None = None,
        required: Iterable[str] = (),
    ) -> TaskSet:
        required = tuple(required)
        if isinstance(source, str) and source.startswith("shipped:") and not column_map:
            # Envs are made by the hundred from one shipped set: share its parsed, checked
            # rows (a TaskSet never hands its row dicts out) instead of copying each time.
            return self._shipped(source.partition(":")[2] or split, required)
        if isinstance(source, TaskSet):
            task_set = source
        elif isinstance(source, (str, Path)):
            task_set = TaskSet(str(source), tuple(self._rows(str(source), split)))
        else:
            task_set = TaskSet("rows", tuple(dict(row) for row in source))
        rows = tuple(rename_columns(row, column_map) for row in task_set.rows)
        check_columns(rows, required, task_set.name)
        return TaskSet(task_set.name, rows)

    def _shipped(self, name: str, required: tuple[str, ...]) -> TaskSet:
        path = self._shipped_path(name)
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        return _shipped_task_set(f"shipped:{name}", path, stamp, required)

    def _shipped_path(self, name: str) -> Path:
        if name not in self.shipped:
            raise ValueError(f"no shipped task set {name!r}; choose from {sorted(self.shipped)}")
        return Path(self.shipped[name])

    def _rows(self, source: str, split: str) -> list[Row]:
        scheme, _, rest = source.partition(":")
        if scheme == "shipped":
            path = self._shipped_path(rest or split)
            stat = path.stat()
            return list(_shipped_rows(path, (stat.st_mtime_ns, stat.st_size)))
        loaders: Mapping[str, Callable[[str, str], list[Row]]] = {
            "hf": _load_hf,
            "registry": _load_registry,
        }
        if rest and scheme in loaders:
            return loaders[scheme](rest, split)
        return read_task_file(source)


@functools.lru_cache(maxsize=16)
def _shipped_rows(path: Path, stamp: tuple[int, int]) -> tuple[Row, ...]:
    # Every env instance of a kind reads the same shipped file; with hundreds of envs made in
    # parallel the re-parsing dominated env creation. Parsed once per process; `stamp`
    # (mtime, size) reloads an edited file. TaskSources.load copies each row before use.
    del stamp
    return tuple(read_task_file(path))


@functools.lru_cache(maxsize=16)
def _shipped_task_set(
    name: str, path: Path, stamp: tuple[int, int], required: tuple[str, ...]
) -> TaskSet:
    rows = _shipped_rows(path, stamp)
    check_columns(rows, required, name)
    return TaskSet(name, rows)


def rename_columns(row: Mapping[str, Any], column_map: Mapping[str, str] | None) -> Row:
    if not column_map:
        return dict(row)
    return {column_map.get(key, key): value for key, value in row.items()}


def check_columns(rows: Sequence[Row], required: Iterable[str], name: str) -> None:
    required = list(required)
    for index, row in enumerate(rows):
        missing = [column for column in required if column not in row]
        if missing:
            raise ValueError(
                f"task set {name!r}, row {index}: missing column(s) {missing}; "
                f"it has {sorted(row)} (pass column_map={{'their_name': '{missing[0]}'}})"
            )


def task_id(row: Mapping[str, Any], fallback: str) -> str:
    """The row's own id when it has one, else a stable id derived from its content."""
    for key in ("task_id", "id", "uid"):
        if key in row and row[key] is not None:
            return str(row[key])
    import hashlib

    digest = hashlib.sha1(json.dumps(row, sort_keys=True, default=str).encode()).hexdigest()
    return f"{fallback}-{digest[:12]}"
