"""``rllm-eval``'s run folder: killed and resumed it loses and doubles no episode; a dead
server's episodes are counted apart and make the exit status 1; an existing run is not
silently replaced; bad folders are one line and status 2 before anything slow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from rllm_agents.cli.eval import main
from rllm_agents.cli.eval_jobs import finished_episodes
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.run_folder import KILL_AT_VARIABLE, RunLock
from rllm_agents.testing.fault_server import FaultServer
from rllm_agents.types import Episode

from tests.cli_errors import assert_one_line_error

PROG = "rllm-eval"
LAKE = ["--env", "rllm/FrozenLake-v0"]
TINY = [*LAKE, "--model", "tiny", "--n", "2", "--num-tasks", "3", "--max-tokens", "4"]
TINY += ["--max-turns", "2", "--parallel", "2", "--no-progress"]
COUNTS = ("episodes", "tasks", "scored_episodes", "infra_failures", "samples_per_task")


def episodes_of(output: Path) -> list[Episode]:
    lines = (output / "episodes.jsonl").read_text().splitlines()
    return [Episode.from_json(line) for line in lines]


def summary_of(output: Path) -> dict:
    return json.loads((output / "summary.json").read_text())


def jobs(episodes: list[Episode]) -> Counter:
    return Counter((e.info["task_key"], e.info["seed"]) for e in episodes)


@pytest.mark.slow
def test_killed_and_resumed_loses_and_doubles_no_episode(tmp_path, capsys):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert main([*TINY, "--output", str(straight)]) == 0
    command = [sys.executable, "-m", "rllm_agents.cli.eval", *TINY, "--output", str(killed)]
    environment = {**os.environ, KILL_AT_VARIABLE: "episode_written@3"}
    finished = subprocess.run(command, env=environment, capture_output=True, timeout=300)
    assert finished.returncode == -signal.SIGKILL, finished.stderr[-2000:]
    assert len(episodes_of(killed)) == 3 and not (killed / "summary.json").exists()

    refused = main([*TINY, "--output", str(killed)])  # neither --resume nor --overwrite
    assert refused == 2 and "already holds a run" in capsys.readouterr().err
    assert main([*TINY, "--output", str(killed), "--resume"]) == 0

    expected, resumed = summary_of(straight), summary_of(killed)
    assert {key: resumed[key] for key in COUNTS} == {key: expected[key] for key in COUNTS}
    assert resumed["resumed_episodes"] == 3
    assert jobs(episodes_of(killed)) == jobs(episodes_of(straight))  # each (task, sample) once
    assert max(jobs(episodes_of(killed)).values()) <= 2


@pytest.mark.slow
def test_overwrite_replaces_and_resume_of_a_finished_run_runs_nothing(tmp_path, capsys):
    output = tmp_path / "run"
    assert main([*TINY, "--output", str(output)]) == 0
    before = episodes_of(output)
    assert main([*TINY, "--output", str(output), "--resume"]) == 0
    assert [e.id for e in episodes_of(output)] == [e.id for e in before]
    assert summary_of(output)["resumed_episodes"] == len(before)
    assert main([*TINY, "--output", str(output), "--overwrite"]) == 0
    assert len(episodes_of(output)) == len(before)
    assert summary_of(output)["resumed_episodes"] == 0


def test_server_death_mid_eval_counts_failures_apart_and_exits_1(tmp_path, capsys, monkeypatch):
    # No waiting between retries: the dead server's episodes fail at once.
    monkeypatch.setattr(OpenAIEngine, "_backoff_s", lambda self, attempt, retry_after: 0.0)
    output = tmp_path / "run"
    with FaultServer(completion="Down", latency_s=0.1) as server:

        def kill_after_three_answers():
            while server.stats.requests < 3:
                time.sleep(0.005)
            server.close()  # the port closes: every later request is refused

        killer = threading.Thread(target=kill_after_three_answers, daemon=True)
        killer.start()
        argv = [*LAKE, "--base-url", server.base_url, "--model", "canned", "--num-tasks", "6"]
        argv += ["--max-turns", "1", "--parallel", "1", "--no-progress", "--output", str(output)]
        code = main(argv)
        killer.join(timeout=10)
    captured = capsys.readouterr()
    assert code == 1
    summary = summary_of(output)
    assert 0 < summary["infra_failures"] < summary["episodes"] == 6
    assert summary["scored_episodes"] + summary["infra_failures"] == 6
    assert "failed for infrastructure" in captured.err and "--max-failure-rate" in captured.err
    assert "infra_failures" in captured.out and "not scored" in captured.out
    # Scores cover the finished episodes only: the failed ones are not zeros in the mean.
    finished = [e for e in episodes_of(output) if e.termination_reason.value != "error"]
    assert summary["mean_reward"] == pytest.approx(sum(e.reward for e in finished) / len(finished))
    # A threshold above the failure rate lets the run pass; resume reruns only the failed.
    with FaultServer(completion="Up") as server:
        argv[argv.index("--base-url") + 1] = server.base_url
        assert main([*argv, "--resume", "--max-failure-rate", "1"]) == 0
        assert server.stats.requests == summary["infra_failures"]
    resumed = summary_of(output)
    assert resumed["infra_failures"] == 0 and resumed["episodes"] == 6


DAMAGED_LINES = {"resume-damaged": b"{broken\n", "resume-not-utf8": b'{"id": "\xff\xfe"}\n'}


@pytest.mark.parametrize(
    "kind",
    [
        "proc", "file", "locked", "resume-nothing", "resume-damaged", "resume-not-utf8",
        "overwrite-train-run",
    ],
)  # fmt: skip
def test_bad_output_is_one_line_before_anything_slow(tmp_path, capsys, kind):
    output = {"proc": Path("/proc/rllm-x"), "file": tmp_path / "f"}.get(kind, tmp_path / "o")
    extra = ["--resume"] if kind.startswith("resume") else []
    if kind == "file":
        output.write_text("x")
    if kind == "overwrite-train-run":  # rllm-train's folder: --overwrite would leave it mixed
        output.mkdir()
        (output / "metrics.jsonl").write_text('{"step": 1}\n')
        (output / "summary.json").write_text("{}")
        extra = ["--overwrite"]
    if kind in DAMAGED_LINES:  # a bad line with its newline: damage, not a kill
        output.mkdir()
        damaged = b'{"id": "a:0"}\n' + DAMAGED_LINES[kind] + b'{"id": "b:0"}\n'
        (output / "episodes.jsonl").write_bytes(damaged)
    # An unknown model would fail later; the folder is checked first.
    argv = [*LAKE, "--model", str(tmp_path / "no-model"), "--output", str(output), *extra]
    expected = {
        "proc": "cannot be written",
        "file": "is an existing file",
        "locked": f"in use by another run (pid {os.getpid()} on",
        "resume-nothing": "holds no run to continue",
        "resume-damaged": "episodes.jsonl:2: not a JSON record",
        "resume-not-utf8": "episodes.jsonl:2: not a JSON record (not UTF-8",
        "overwrite-train-run": "holds an rllm-train run (metrics.jsonl); rllm-eval does not",
    }[kind]
    if kind == "locked":
        output.mkdir()
        with RunLock.acquire(output):
            code = main(argv)
    else:
        code = main(argv)
    captured = capsys.readouterr()
    assert_one_line_error(code, captured.err, PROG, expected)
    if kind == "resume-nothing":
        assert not output.exists()  # a folder made only for the check goes again
    if kind == "overwrite-train-run":
        assert (output / "summary.json").read_text() == "{}"  # the other run untouched


def test_repair_moves_damaged_episodes_aside_and_the_resume_goes_on(tmp_path, capsys):
    output = tmp_path / "o"
    output.mkdir()
    log = output / "episodes.jsonl"
    whole = [Episode(id=f"t{n}:0", info={"seed": n}).to_json().encode() + b"\n" for n in range(3)]
    damage = [b"{broken\n", b'{"id": "\xff\xfe"}\n']
    log.write_bytes(whole[0] + damage[0] + whole[1] + damage[1] + whole[2])
    # The model does not exist: the resume gets past the episodes to it, and stops there.
    argv = [*LAKE, "--model", str(tmp_path / "no-model"), "--output", str(output), "--resume"]
    code = main([*argv, "--repair"])
    captured = capsys.readouterr()
    assert_one_line_error(code, captured.err, PROG, "no-model")
    assert f"{PROG}: --repair: moved 2 damaged lines of {log} to {log}.damaged" in captured.out
    assert log.read_bytes() == b"".join(whole)
    assert (output / "episodes.jsonl.damaged").read_bytes() == b"".join(damage)
    without_resume = [arg for arg in argv if arg != "--resume"]
    assert_one_line_error(
        main([*without_resume, "--repair"]), capsys.readouterr().err, PROG, "--resume"
    )


def test_resume_keeps_what_a_kill_left_and_drops_its_cut_short_line(tmp_path):
    log = tmp_path / "episodes.jsonl"
    whole = [Episode(id=f"t{n}:0", info={"seed": n}) for n in range(2)]
    log.write_text("".join(e.to_json() + "\n" for e in whole) + whole[0].to_json()[:40])
    assert [e.id for e in finished_episodes(log)] == ["t0:0", "t1:0"]
    assert log.read_text() == "".join(e.to_json() + "\n" for e in whole)  # the cut line gone
    assert finished_episodes(tmp_path / "none.jsonl") == []
