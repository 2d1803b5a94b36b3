"""The training benchmarks' side runner: a side cut short keeps the steps it finished.

On a borrowed machine (a GPU lent for minutes) one slow or broken side must not cost the
figures of the others, nor leave its processes running into the next side."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.benchmark_runs import benchmark_module

run_training = benchmark_module("verl_vs_native").run_training


def side_command(output, *, rows: int, then: str) -> list[str]:
    """A stand-in for one ``rllm-train`` side: writes `rows` step rows, a half-written one,
    starts a grandchild that would outlive it, then does `then`."""
    script = textwrap.dedent(
        f"""
        import json, pathlib, subprocess, sys, time
        out = pathlib.Path({str(output)!r})
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "metrics.jsonl", "w") as metrics:
            for step in range(1, {rows} + 1):
                metrics.write(json.dumps({{"step": step, "reward_mean": 0.5}}) + "\\n")
            metrics.write('{{"step": {rows + 1}, "rew')
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        (out / "child.pid").write_text(str(child.pid))
        {then}
        """
    )
    return [sys.executable, "-c", script]


def alive(pid: int, *, within: float = 5.0) -> bool:
    """Whether `pid` still runs `within` seconds from now (a zombie counts as gone): SIGKILL is
    delivered asynchronously, so a process killed a moment ago may still be listed."""
    deadline = time.monotonic() + within
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


def test_a_side_out_of_time_keeps_its_finished_steps_and_takes_its_children_along(tmp_path, capsys):
    output = tmp_path / "side"
    command = side_command(output, rows=2, then="time.sleep(120)")
    rows, seconds = run_training("slow", command, output, timeout=3, keep_going=True)
    assert [row["step"] for row in rows] == [1, 2]  # the half-written row is left out
    assert seconds < 60
    assert "slow stopped after its 3 s" in capsys.readouterr().err
    assert not alive(int((output / "child.pid").read_text()))


def test_a_failed_side_is_reported_and_the_benchmark_goes_on_only_when_asked(tmp_path, capsys):
    output = tmp_path / "side"
    command = side_command(output, rows=1, then="sys.exit('the side broke')")
    rows, _ = run_training("broken", command, output, keep_going=True)
    assert [row["step"] for row in rows] == [1]
    assert "the side broke" in capsys.readouterr().err
    assert not alive(int((output / "child.pid").read_text()))  # its leftovers are gone too
    with pytest.raises(SystemExit, match="the side broke"):
        run_training("broken", command, output)
    assert json.loads((output / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1
