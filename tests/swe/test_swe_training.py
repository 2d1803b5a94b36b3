"""``rllm-train --env rllm/SWE-v0``: a short native run end to end (the tiny model, real
containers, episodes graded at the env's turn limit). The verl dry run of every registered id,
this one included, is tested in tests/train/test_cli.py."""

from __future__ import annotations

import json

import pytest
from rllm_train.cli import main

from tests.envs.swe_support import FAST_POLICY, require_images, shipped_rows

pytestmark = pytest.mark.slow


def test_a_short_native_run_trains_on_swe_tasks(tmp_path):
    require_images({row["image_name"] for row in shipped_rows("train")})
    output = tmp_path / "run"
    policy = json.dumps(FAST_POLICY).replace(" ", "")
    argv = ["--env", "rllm/SWE-v0", "--model", "tiny", "--steps", "1", "--output", str(output)]
    argv += ["--no-progress", "rollout.tasks_per_step=2", "rollout.n=2", "rollout.max_turns=2"]
    argv += ["rollout.max_response_tokens=16", "rollout.max_prompt_tokens=6000"]
    argv += ["env.kwargs.max_turns=2", f"env.kwargs.policy={policy}", "trainer.save_every=0"]
    argv += ["trainer.validate_held_out=false"]  # held-out SWE episodes: another test's job
    assert main(argv) == 0
    (metrics,) = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert metrics["episodes"] == 4 and metrics["failures"] == 0
    assert metrics["reward_mean"] == 0.0  # a random model fixes nothing; every episode graded
    assert len(set(metrics["task_ids"])) == 2
    assert (output / "summary.json").exists()
