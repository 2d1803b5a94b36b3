"""``trainer.max_failure_rate``: a step whose episodes failed (infrastructure, crashed programs:
not zero rewards) stops ``rllm-train`` with one line and a non-zero exit."""

from __future__ import annotations

import json
import shlex
import sys

import pytest
from rllm_train.cli import main
from rllm_train.config import ConfigError, build_config
from rllm_train.native.step_metrics import progress_status
from rllm_train.run.failures import (
    TooManyFailedEpisodes,
    check_failure_rate,
    failure_kind,
    step_failures,
)
from rllm_train.run.reporting import METRICS_FILE, read_metrics


def test_failed_episodes_are_infrastructure_failures_and_errors_not_zero_rewards():
    failures = step_failures(
        [
            ("sandbox_died", None),
            (None, "crashed: exit status 3"),
            (None, "the model server went away"),
            (None, None),  # a zero reward, or any reward: not a failure
            (None, None),
        ]
    )
    assert (failures.failed, failures.total) == (3, 5)
    assert dict(failures.kinds) == {"sandbox_died": 1, "crashed": 1, "error": 1}
    assert failure_kind(None, None) is None


def test_the_rule_stops_a_step_above_the_rate_only():
    half = step_failures([("died", None), (None, None)])
    check_failure_rate(half, 0.5, step=1)  # at the limit: goes on
    with pytest.raises(TooManyFailedEpisodes) as raised:
        check_failure_rate(half, 0.4, step=2)
    message = str(raised.value)
    assert "\n" not in message
    assert "step 2: 1 of 2 episodes failed (died 1)" in message
    assert "trainer.max_failure_rate=0.4" in message
    every = step_failures([("died", None)] * 4)
    check_failure_rate(every, 1.0, step=1)  # 1: never stops
    check_failure_rate(step_failures([]), 0.0, step=1)  # no episodes: nothing failed


def test_the_rate_is_a_share():
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="trainer.max_failure_rate"):
            build_config(overrides={"trainer.max_failure_rate": bad})
    assert build_config().trainer.max_failure_rate == 0.5


def test_the_progress_line_shows_the_failed_episodes():
    status = progress_status(
        {"reward_mean": 0.25, "loss": 0.5, "failed_episodes": 3, "episodes": 8}
    )
    assert status == "reward 0.25  loss 0.500  failed 3/8"


@pytest.mark.slow
def test_a_run_of_failing_episodes_stops_with_one_line_and_a_nonzero_exit(
    tmp_path, tiny_model, capsys
):
    """An agent program that crashes on every task: before, two steps of 100% errored
    episodes printed "reward 0.000" and exited 0."""
    crash = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(3)'"
    argv = [
        "--model", tiny_model, "--output", str(tmp_path), "--steps", "2", "--no-progress",
        "--agent-cmd", crash, "rollout.tasks_per_step=2", "rollout.n=2", "program.retries=0",
        "trainer.validate_held_out=false",
    ]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # One line of ours (transformers' own progress bars aside, when the model loads).
    [line] = [line for line in err.splitlines() if line.startswith("rllm-train:")]
    assert line.startswith("rllm-train: stopped: step 1: 4 of 4 episodes failed (crashed 4)")
    assert "trainer.max_failure_rate=0.5" in line
    assert read_metrics(tmp_path / METRICS_FILE) == []  # no step was trained on them
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 0
    # Raised, the limit lets the same run finish - on its failed episodes, as asked.
    rerun = tmp_path / "anyway"
    assert main([*argv[:2], "--output", str(rerun), *argv[4:], "trainer.max_failure_rate=1"]) == 0
    rows = read_metrics(rerun / METRICS_FILE)
    assert [row["failed_episodes"] for row in rows] == [4, 4]
