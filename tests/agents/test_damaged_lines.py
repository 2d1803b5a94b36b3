"""What a resume does with damaged lines in its logs: refuses them in one line naming the first,
or (``--repair``) moves them beside the log and keeps every whole line byte for byte."""

from __future__ import annotations

import pytest
from rllm_agents.damaged_lines import settle_logs
from rllm_agents.run_folder import RunFolderError

WHOLE = [b'{"step": 1, "x": 0.1}\n', b'{"step": 2, "x": 0.30000000000000004}\n', b'{"step": 3}\n']
DAMAGED = [b"garbage{\n", b'{"step": \xff\xfe}\n']
CUT_SHORT = b'{"step": 4, "x'  # what a writer killed mid-line leaves


def damaged_log(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(WHOLE[0] + DAMAGED[0] + WHOLE[1] + DAMAGED[1] + WHOLE[2] + CUT_SHORT)
    return path


def test_damage_stops_the_resume_in_one_line_naming_the_first_damaged_line(tmp_path):
    path = damaged_log(tmp_path)
    before = path.read_bytes()
    with pytest.raises(RunFolderError) as refused:
        settle_logs([tmp_path / "absent.jsonl", path], repair=False)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"--resume: {path}:2: not JSON (Expecting value at column 1)")
    assert "2 damaged lines in all" in message and "--repair moves them" in message
    assert path.read_bytes() == before  # refused: nothing touched


def test_a_cut_short_last_line_alone_does_not_stop_the_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(WHOLE[0] + CUT_SHORT)
    assert settle_logs([path], repair=False) == []
    assert path.read_bytes() == WHOLE[0] + CUT_SHORT


def test_repair_keeps_every_whole_line_and_moves_the_damaged_ones_aside(tmp_path):
    path = damaged_log(tmp_path)
    repairs = settle_logs([path, tmp_path / "absent.jsonl"], repair=True)
    assert [repair.describe() for repair in repairs] == [
        f"moved 3 damaged lines of {path} to {path}.damaged"
    ]
    assert path.read_bytes() == b"".join(WHOLE)
    assert (tmp_path / "metrics.jsonl.damaged").read_bytes() == b"".join(
        DAMAGED
    ) + CUT_SHORT + b"\n"
    # Mended: a second repair has nothing to move, and the resume's check passes.
    assert settle_logs([path], repair=True) == []
    settle_logs([path], repair=False)
