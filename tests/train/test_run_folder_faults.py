"""The native trainer killed (a real SIGKILL) at every phase boundary of a step loses nothing,
and a run killed and resumed ends as if never interrupted: same model, optimizer, RNG, data
order, and a report of the whole run.

One run is killed again and again through ``$RLLM_TEST_KILL_AT`` (rllm_agents.run_folder's
fault_point) - before and after a step's metrics row, after the update, inside the
checkpoint write, right after ``latest`` moves, and in the start-up of a resume while it
rewrites ``metrics.jsonl`` - and resumed each time. After every kill the log, reconciled as
a resume reconciles it, is exactly the uninterrupted run's rows up to the checkpoint; at the
end the log holds each step once and the weights equal the uninterrupted run's bit for bit,
on an env whose updates have non-zero gradients. The run folder's lock and its refusals
(a second writer, a resume of nothing, bad paths) are tested here too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
import torch
from rllm_agents.run_folder import RunLock
from rllm_train.cli import main
from rllm_train.run.reporting import reconcile

from tests.train.resume_runs import (
    STEPS,
    command,
    final_state,
    latest_step,
    metric_rows,
    run,
    run_env,
)

# (where the run is killed, the checkpoint step it leaves): one kill per phase, in the order
# the resumed runs reach them.
KILLS = [
    ("before_row@1", 0),  # no checkpoint yet: the resume starts over
    ("after_row@1", 0),  # the row is there, its checkpoint is not: the row plays again
    ("checkpoint_write@1", 0),  # inside the checkpoint write, before its rename
    ("after_latest@1", 1),  # the commit point passed: row and checkpoint both kept
    ("after_update@2", 1),
    ("resume_start", 1),  # the resume's rewrite of metrics.jsonl, temp written, not renamed
    ("before_row@3", 2),  # a row phase once a checkpoint exists
]


@pytest.mark.slow
def test_kill_9_at_every_phase_then_resume_loses_and_doubles_nothing(tmp_path, tiny_model):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert run(straight, tiny_model).returncode == 0
    expected = metric_rows(straight)
    assert [row["step"] for row in expected] == list(range(1, STEPS + 1))
    # The weights really move: rewards differ within each group.
    assert all(row["advantage_abs_mean"] > 0 and row["grad_norm"] > 0 for row in expected)

    for number, (kill_at, checkpoint_step) in enumerate(KILLS):
        extra = ("--resume",) if number else ()
        finished = run(killed, tiny_model, *extra, kill_at=kill_at)
        assert finished.returncode == -signal.SIGKILL, (kill_at, finished.stderr[-2000:])
        assert latest_step(killed) == checkpoint_step, kill_at
        rows = metric_rows(killed) if (killed / "metrics.jsonl").exists() else []
        assert reconcile(rows, checkpoint_step) == expected[:checkpoint_step], kill_at
        # Nothing of the killed run is lost: the log still holds every committed step.
        assert [row["step"] for row in rows][:checkpoint_step] == list(
            range(1, checkpoint_step + 1)
        ), kill_at

    last = run(killed, tiny_model, "--resume")
    assert last.returncode == 0, last.stderr[-2000:]
    # Each step exactly once, the same numbers: data order, sampled tokens, rewards, losses.
    assert metric_rows(killed) == expected
    # The resumed process reports the whole run, not only the steps it played itself.
    first, final = expected[0]["reward_mean"], expected[-1]["reward_mean"]
    assert f"{STEPS} steps; reward {first:.3f} (step 1) -> {final:.3f} (step {STEPS})" in (
        last.stdout
    )
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["reported_steps"] == [1, STEPS] and summary["reward_first"] == first
    # Same model, optimizer and step as the run never interrupted, bit for bit.
    resumed, uninterrupted = final_state(killed), final_state(straight)
    assert resumed["step"] == STEPS
    for name, tensor in uninterrupted["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    for index, state in uninterrupted["optimizer"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(state[key], resumed["optimizer"]["state"][index][key])
    # The killed checkpoint writes left no temporary folder behind (their owners are dead).
    assert not list((killed / "checkpoints").glob(".step_*.tmp-*"))
    assert not list(killed.glob(".*.tmp-*"))  # nor the resume's metrics rewrite


@pytest.mark.slow
def test_a_second_writer_and_a_resume_while_running_are_refused(tmp_path, tiny_model):
    output = tmp_path / "run"
    first = subprocess.Popen(
        command(output, tiny_model, **{"trainer.steps": 40}),
        env=run_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (output / "metrics.jsonl").exists():
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        for extra in ((), ("--resume",)):
            second = run(output, tiny_model, *extra)
            assert second.returncode == 2, second.stderr
            refusal = second.stderr.strip().splitlines()
            assert len(refusal) == 1 and f"in use by another run (pid {first.pid} " in refusal[0]
        assert first.poll() is None  # the first run goes on, untouched
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert first.returncode == 128 + signal.SIGTERM  # SIGTERM unwinds: cleanup ran
    steps = [row["step"] for row in metric_rows(output)]
    assert steps == list(range(1, len(steps) + 1))  # one writer's rows, none interleaved


def refusal(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("output", "expected"),
    [("/proc/rllm-x", "cannot be written"), ("FILE", "is an existing file")],
)
def test_bad_output_is_one_line_before_the_model_loads(
    tmp_path, capsys, monkeypatch, output, expected
):
    import rllm_train.native.models as models

    def no_model(*_args, **_kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "load_policy", no_model)
    if output == "FILE":
        output = tmp_path / "a-file"
        output.write_text("x")
    line = refusal(capsys, ["--model", "tiny", "--output", str(output), "trainer.steps=1"])
    assert expected in line and line.startswith("rllm-train: ")


def test_resume_of_nothing_and_a_fresh_run_over_an_old_one_are_refused(tmp_path, capsys):
    empty = tmp_path / "empty"
    line = refusal(capsys, ["--model", "tiny", "--output", str(empty), "--resume"])
    assert "holds no run to continue" in line
    assert not empty.exists()  # made for the check only, so removed again
    empty.mkdir()
    (empty / "config.yaml").write_text("{}")
    line = refusal(capsys, ["--model", "tiny", "--output", str(empty)])
    assert "already holds a run; pass --resume" in line


def test_an_eval_run_folder_is_not_trained_into(tmp_path, capsys):
    """rllm-eval's folder holds a summary.json rllm-train would replace: a mixed folder."""
    (tmp_path / "episodes.jsonl").write_text('{"id": "a:0"}\n')
    (tmp_path / "summary.json").write_text("{}")
    for extra in ((), ("--resume",)):
        line = refusal(capsys, ["--model", "tiny", "--output", str(tmp_path), *extra])
        assert "holds an rllm-eval run (episodes.jsonl); rllm-train does not" in line
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        ".lock", "episodes.jsonl", "summary.json",
    ]  # fmt: skip


def test_a_held_lock_names_its_holder(tmp_path, capsys):
    with RunLock.acquire(tmp_path):
        line = refusal(capsys, ["--model", "tiny", "--output", str(tmp_path)])
    assert f"in use by another run (pid {os.getpid()} on " in line
    # Released with its holder: the next one gets it.
    RunLock.acquire(tmp_path).release()
    record = json.loads((tmp_path / ".lock").read_text())
    assert record["pid"] == os.getpid()


def test_a_cleanup_removes_only_its_own_or_dead_owners_temporary_checkpoints(tmp_path):
    from rllm_train.native import checkpoint

    gone = subprocess.Popen(["true"])
    gone.wait()
    live, dead, own = os.getppid(), gone.pid, os.getpid()
    for pid in (live, dead, own):
        (tmp_path / f".step_9.tmp-{pid}").mkdir()
    checkpoint._prune(tmp_path, keep=1)
    # A concurrent run's staging folder (its owner alive) is not this run's to delete.
    assert [path.name for path in tmp_path.iterdir()] == [f".step_9.tmp-{live}"]
