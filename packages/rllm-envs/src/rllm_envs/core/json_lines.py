"""JSON-lines files read as bytes, line by line, so that a damaged line is a finding, never a crash.

Every reader of the JSON-lines files the packages write or take in (episodes, a training
run's metrics, verl's step logs, task files) goes through :func:`read_lines`. A line is
*damaged* when its bytes are not UTF-8, its text is not JSON or its JSON is not an object;
:class:`JsonLine` says which line and why, and each reader decides what damage means to it:
a refusal naming ``file:line`` (:class:`DamagedLineError`), or, for a run folder resumed with
``--repair``, a line moved aside (:mod:`rllm_agents.damaged_lines`).

A damaged last line with no newline is what a writer killed mid-line leaves behind
(:attr:`JsonLine.cut_short`): the readers of run logs skip it, where a file written by hand
(a task file) refuses it like any other damage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What a line holds that is JSON but no object, in JSON's words (not Python's).
JSON_KINDS: dict[type, str] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


@dataclass(frozen=True)
class JsonLine:
    """One non-blank line of a JSON-lines file."""

    number: int  # from 1, blank lines counted (as an editor numbers them)
    raw: bytes  # as stored, its newline included
    value: dict[str, Any] | None  # the decoded object; None when the line is damaged
    problem: str = ""  # why the line is damaged; "" when it is whole

    @property
    def damaged(self) -> bool:
        return self.value is None

    @property
    def cut_short(self) -> bool:
        """Damaged and without a newline: only a file's last line can be, and only a writer
        killed in the middle of it leaves one."""
        return self.damaged and not self.raw.endswith(b"\n")


class DamagedLineError(ValueError):
    """A damaged line where the reader needs every line whole; its message is one line,
    ``file:line: problem``."""

    def __init__(self, path: str | Path, line: JsonLine) -> None:
        super().__init__(f"{path}:{line.number}: {line.problem}")
        self.path = Path(path)
        self.line = line


def read_lines(path: str | Path) -> Iterator[JsonLine]:
    """Each non-blank line of `path`, decoded where it can be. Streams: one line in memory."""
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                yield decode_line(number, raw)


def decode_line(number: int, raw: bytes) -> JsonLine:
    """`raw` as a JsonLine: its object, or the reason it has none."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start]
        return JsonLine(
            number, raw, None, f"not UTF-8 (byte 0x{bad:02x} at column {error.start + 1})"
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return JsonLine(number, raw, None, f"not JSON ({error.msg} at column {error.colno})")
    except RecursionError:
        return JsonLine(number, raw, None, "not JSON (nested too deeply to read)")
    if not isinstance(value, dict):
        kind = JSON_KINDS.get(type(value), "a value")
        return JsonLine(number, raw, None, f"not a JSON object ({kind})")
    return JsonLine(number, raw, value)


def whole_objects(
    path: str | Path, *, skip_cut_short: bool
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each line of `path`. A damaged line raises
    DamagedLineError - except, with `skip_cut_short`, a killed writer's cut-short last line,
    which is left out."""
    for line in read_lines(path):
        if line.value is not None:
            yield line.number, line.value
        elif not (skip_cut_short and line.cut_short):
            raise DamagedLineError(path, line)
