"""The JSON-lines reader every reader of episodes, metrics and task files goes through: lines
read as bytes, each whole or damaged with the reason, a killed writer's last line told apart."""

from __future__ import annotations

import pytest
from rllm_envs.core.json_lines import DamagedLineError, read_lines, whole_objects
from rllm_envs.core.tasks import TaskSources

# Whole, blank, an array, bytes that are not UTF-8, text that is not JSON, whole, cut short.
LINES = b'{"a": 1}\n\n[1, 2]\n{"b": \xff\xfe}\ngarbage{\n{"c": 3}\n{"d": '


def test_each_line_is_whole_or_damaged_with_the_reason(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(LINES)
    lines = list(read_lines(path))
    assert [(line.number, line.value) for line in lines] == [
        (1, {"a": 1}),
        (3, None),
        (4, None),
        (5, None),
        (6, {"c": 3}),
        (7, None),
    ]
    assert [line.problem for line in lines if line.damaged] == [
        "not a JSON object (an array)",
        "not UTF-8 (byte 0xff at column 7)",
        "not JSON (Expecting value at column 1)",
        "not JSON (Expecting value at column 7)",
    ]
    assert [line.cut_short for line in lines] == [False] * 5 + [True]
    # Every byte of every non-blank line is there, as stored.
    assert b"".join(line.raw for line in lines) == LINES.replace(b"\n\n", b"\n")


def test_whole_objects_refuses_damage_and_may_skip_a_cut_short_last_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": ')
    assert list(whole_objects(path, skip_cut_short=True)) == [(1, {"a": 1}), (2, {"a": 2})]
    with pytest.raises(DamagedLineError, match=r"log.jsonl:3: not JSON"):
        list(whole_objects(path, skip_cut_short=False))
    path.write_bytes(b'{"a": 1}\n\xff\xfe\n{"a": 2}\n')
    with pytest.raises(DamagedLineError, match=r"log.jsonl:2: not UTF-8 \(byte 0xff at column 1\)"):
        list(whole_objects(path, skip_cut_short=True))


def test_a_task_file_with_bytes_that_are_not_utf8_names_the_line(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(b'{"question": "1+1"}\n{"question": "\xff\xfe"}\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl:2: not UTF-8"):
        TaskSources().load(str(tasks))
