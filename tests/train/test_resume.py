"""A run killed with SIGKILL resumes where it stopped: same model, optimizer, RNG, data order.

The proof: a run killed after its second checkpoint and resumed ends with exactly the weights,
optimizer state and per-step metrics of a run that was never interrupted - on a task whose
rewards differ within each group, so every step really moves the weights - and what the
resumed run reports covers the whole run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.train import reply_length
from tests.train.conftest import run_overrides

STEPS = 4
REPO = Path(__file__).resolve().parents[2]


def command(output: Path, model: str, *extra: str, **changes: object) -> list[str]:
    """The CLI call of these runs; `changes` ({"trainer.steps": 40}) replace their settings
    (an override in `extra` would not: the settings come after it and win)."""
    overrides = run_overrides(
        output,
        model,
        **{
            "trainer.steps": STEPS,
            "trainer.save_every": 1,
            "trainer.keep_checkpoints": 10,
            "rollout.temperature": 2.0,
            "trainer.tensorboard": False,
            **changes,
        },
    )
    return [
        sys.executable,
        "-m",
        "rllm_train.cli",
        "--env",
        reply_length.MODULE_ENV_ID,
        *extra,
        *(f"{key}={value}" for key, value in overrides.items()),
    ]


def run_env() -> dict[str, str]:
    # One thread: the same arithmetic order in every process, so runs compare bit for bit.
    # The repository comes first on the path (for tests.train.reply_length), then whatever
    # the test run put there (a source tree under test).
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def final_state(output: Path) -> dict:
    return torch.load(output / "checkpoints" / f"step_{STEPS}" / "state.pt", weights_only=False)


def metric_rows(output: Path) -> list[dict]:
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


@pytest.mark.slow
def test_resume_after_kill_9_matches_an_uninterrupted_run(tmp_path, tiny_model):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(command(straight, tiny_model), env=run_env(), check=True, capture_output=True)

    process = subprocess.Popen(
        command(killed, tiny_model),
        env=run_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        latest = killed / "checkpoints" / "latest"
        deadline = time.monotonic() + 120
        while not (latest.exists() and latest.read_text().strip() == "step_2"):
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no second checkpoint within 120 s"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (killed / "checkpoints" / f"step_{STEPS}").exists()

    resumed_run = subprocess.run(
        command(killed, tiny_model, "--resume"),
        env=run_env(),
        check=True,
        capture_output=True,
        text=True,
    )

    rows = metric_rows(straight)
    assert all(row["advantage_abs_mean"] > 0 and row["grad_norm"] > 0 for row in rows)
    assert metric_rows(killed) == rows  # data order, sampled tokens, rewards, losses
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    # The resumed process reports the whole run, not only the steps it played itself.
    first, last = rows[0]["reward_mean"], rows[-1]["reward_mean"]
    assert f"{STEPS} steps; reward {first:.3f} (step 1) -> {last:.3f} (step {STEPS})" in (
        resumed_run.stdout
    )
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["reported_steps"] == [1, STEPS] and summary["reward_first"] == first
    expected, resumed = final_state(straight), final_state(killed)
    assert resumed["step"] == STEPS
    for name, tensor in expected["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    for index, state in expected["optimizer"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(state[key], resumed["optimizer"]["state"][index][key])
