"""A served env is a training and evaluation env like any other: ``rllm-train`` (native, its
episodes in the trainer's process or on Ray env workers) and ``rllm-eval`` play
``rllm/Remote-v0`` against ``rllm-envs serve``, with the installed commands. (verl plays one in
test_verl_async.py's fully asynchronous run.)"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.envs.test_remote import REPO_ROOT, serve, stop
from tests.parts import require_module
from tests.train.ray_head import RayHead
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


def train_on_remote_env(url: str, output, *extra: str) -> None:
    """Two native steps on the served env; each step's 4 episodes played, none failed, and an
    update with a gradient."""
    command(
        "rllm_train.cli", "--env", "rllm/Remote-v0", f"env.kwargs.url={url}",
        "--model", "tiny", "--steps", "2", "--no-progress", "--output", str(output),
        "rollout.tasks_per_step=2", "rollout.n=2", "rollout.max_response_tokens=6",
        "rollout.max_turns=2", "trainer.save_every=0", "trainer.validate_held_out=false",
        "trainer.lr=1e-3", *extra,
    )  # fmt: skip
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "reward_mean" in row]
    assert [row["step"] for row in trained] == [1, 2]
    for row in trained:
        assert row["failed_episodes"] == 0 and row["episodes"] == 4, row
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row


def test_native_training_on_a_remote_env_has_a_gradient(lake_by_length, tmp_path):
    train_on_remote_env(lake_by_length, tmp_path)


def test_ray_env_workers_play_a_remote_env(lake_by_length, tmp_path):
    """``--executor ray``: each Ray worker builds rllm/Remote-v0 from its id and url and plays
    the episodes there, against the same server; the trainer's model answers them over HTTP."""
    require_module("ray", "Ray env workers need ray (pip install 'rllm-agents[ray]')")
    head = RayHead(num_gpus=0, num_cpus=4)  # a cluster apart from the run: it can be read after
    try:
        train_on_remote_env(
            lake_by_length, tmp_path, "--executor", "ray", "rollout.dispatch=async",
            "rollout.ray_workers=2", f"rollout.ray_address={head.address()}",
        )  # fmt: skip
        # The episodes ran on the cluster's env workers (the run's process joins it as a
        # driver, and hosts no actor).
        assert "EpisodeWorker" in head.actors_run()
    finally:
        head.stop()


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
