"""A served env is a training and evaluation env like any other: ``rllm-train`` (native) and
``rllm-eval`` play ``rllm/Remote-v0`` against ``rllm-envs serve``, with the installed commands."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.envs.test_remote import REPO_ROOT, serve, stop
from tests.train.reply_length import LAKE_MODULE_ENV_ID

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lake_by_length():
    """FrozenLake rewarded by the reply's length (so the tiny model's samples differ and an
    update has a gradient), served from the test module that registers it."""
    process, url = serve(LAKE_MODULE_ENV_ID)
    yield url
    stop(process)


def command(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", name, *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_native_training_on_a_remote_env_has_a_gradient(lake_by_length, tmp_path):
    command(
        "rllm_train.cli", "--env", "rllm/Remote-v0", f"env.kwargs.url={lake_by_length}",
        "--model", "tiny", "--steps", "2", "--no-progress", "--output", str(tmp_path),
        "rollout.tasks_per_step=2", "rollout.n=2", "rollout.max_response_tokens=6",
        "rollout.max_turns=2", "trainer.save_every=0", "trainer.validate_held_out=false",
        "trainer.lr=1e-3",
    )  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "reward_mean" in row]
    assert [row["step"] for row in trained] == [1, 2]
    for row in trained:
        assert row["failed_episodes"] == 0 and row["episodes"] == 4, row
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row


def test_rllm_eval_scores_a_remote_env(lake_by_length, tmp_path):
    kwargs = {"url": lake_by_length, "env": "rllm_test/LakeReplyLength-v0"}
    command(
        "rllm_agents.cli.eval", "--env", "rllm/Remote-v0", "--env-kwargs", json.dumps(kwargs),
        "--model", "tiny", "--engine", "transformers", "--num-tasks", "3", "--n", "2",
        "--max-tokens", "8", "--max-turns", "2", "--no-progress", "--output", str(tmp_path),
    )  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["errors"] == 0, summary
    assert summary["infra_failures"] == 0 and summary["mean_reward"] > 0, summary
