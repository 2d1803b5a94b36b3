"""Damaged lines in the JSON-lines logs a resume reads: refused, or moved aside with ``--repair``.

A resume rewrites its logs to hold what it keeps, so a damaged line (not UTF-8, not JSON:
:mod:`rllm_envs.core.json_lines`) must never be read past quietly: every row after it would
go with it. Both CLIs check the logs their resume reads before anything slow. Without
``--repair`` damage stops the resume in one line naming the first damaged ``file:line``
(:func:`check_logs`); with it, each damaged line moves to ``FILE.damaged`` beside its file,
every whole line stays byte for byte, and the resume goes on (:func:`move_damaged_aside`).

A last line cut short by a killed writer is no reason to stop: the resume drops it and plays
its step again or gets its row back from a checkpoint. ``--repair`` moves it aside with the
rest, so that no byte of the log is thrown away.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rllm_envs.core.json_lines import DamagedLineError, read_lines

from rllm_agents.run_folder import RunFolderError, write_atomic

DAMAGED_SUFFIX = ".damaged"


def side_file(path: Path) -> Path:
    """Where --repair puts the damaged lines of `path`: beside it."""
    return path.with_name(path.name + DAMAGED_SUFFIX)


@dataclass(frozen=True)
class Repair:
    """What --repair did to one file."""

    path: Path
    moved: int  # damaged lines moved to side_file(path)

    def describe(self) -> str:
        lines = "line" if self.moved == 1 else "lines"
        return f"moved {self.moved} damaged {lines} of {self.path} to {side_file(self.path)}"


def check_logs(paths: Iterable[Path]) -> None:
    """A RunFolderError naming the first damaged line (a cut-short last line aside) of any
    of `paths` that exist, and how many there are, with the way out."""
    for path in paths:
        if not path.is_file():
            continue
        damaged = [line for line in read_lines(path) if line.damaged and not line.cut_short]
        if damaged:
            more = f"; {len(damaged)} damaged lines in all" * (len(damaged) > 1)
            raise RunFolderError(
                f"--resume: {DamagedLineError(path, damaged[0])}{more}; --repair moves "
                f"them to {side_file(path).name} and keeps every whole line"
            )


def move_damaged_aside(path: Path) -> Repair:
    """Move the damaged lines of `path` to its side file, keeping the whole ones as they were.

    The side file gets them first (appended, synced), then `path` is replaced at once: a kill
    in between leaves a line in both places, never in neither."""
    if not path.is_file():
        return Repair(path, 0)
    whole: list[bytes] = []
    damaged: list[bytes] = []
    for line in read_lines(path):
        if line.damaged:
            damaged.append(line.raw if line.raw.endswith(b"\n") else line.raw + b"\n")
        else:
            whole.append(line.raw)
    if damaged:
        aside = side_file(path)
        with aside.open("ab") as handle:
            handle.writelines(damaged)
            handle.flush()
            os.fsync(handle.fileno())
        write_atomic(path, b"".join(whole).decode("utf-8"))
    return Repair(path, len(damaged))


def settle_logs(paths: Iterable[Path], *, repair: bool) -> list[Repair]:
    """What a resume does first: with `repair`, move every damaged line of `paths` aside (the
    repairs that moved any); without, refuse damaged logs (check_logs)."""
    paths = list(paths)
    if not repair:
        check_logs(paths)
        return []
    return [repair for repair in map(move_damaged_aside, paths) if repair.moved]
