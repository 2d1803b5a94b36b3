"""``rllm-train --backend verl`` trains an agent program: the ``openai``-SDK example agent
(examples/gateway/math_agent.py), unchanged, inside verl's own trainer on this CPU, one step
off-policy.

verl's agent-loop worker runs ``RllmProgramLoop``: the program talks to a gateway in the worker,
whose engine is verl's rollout server (rllm's LocalEngine holding the weights verl synced), and
each run's recorded tokens become the sample verl trains. Under ``verl.mode=one_step_off`` that
rollout has resources of its own and plays step N+1 while step N trains, its weights arriving
through rllm's checkpoint engine. The env is rllm/Math-v0 rewarded by the answer's length
(tests/train/reply_length.py), so a task's samples differ in reward and every GRPO update has
a gradient.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.train.reply_length import MATH_MODULE_ENV_ID
from tests.train.test_verl_async import SAME_POLICY_KL
from tests.train.test_verl_training import rllm_train, trained_rows, verl_trainer

pytestmark = pytest.mark.slow
__all__ = ["verl_trainer"]  # the module's fixture: skips without Ray

EXAMPLES = Path(__file__).parents[2] / "examples" / "gateway"
# One update at lr 1e-3 moves the log-probs by orders of magnitude more than rounding does: a
# rollout one update behind shows a PPO KL above this.
STALE_POLICY_KL = 1e-4


def test_the_example_agent_program_trains_one_step_off_on_verl(tmp_path, verl_ray_head):
    rllm_train(
        tmp_path,
        "--env", MATH_MODULE_ENV_ID,
        "--agent-program", "examples/gateway/math_agent.py:run",  # relative: the workers resolve it
        f"data.train={EXAMPLES / 'addition_train.jsonl'}",
        "--steps", "2", "verl.mode=one_step_off",
        ray_address=verl_ray_head.address(),
    )  # fmt: skip
    rows = trained_rows(tmp_path)
    assert [row["step"] for row in rows] == [1, 2], rows
    for row in rows:
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row
        assert math.isfinite(row["loss"]), row
        assert row["response_tokens_mean"] > 0
        assert row["num_turns_mean"] >= 3  # at least one model call per run, none failed
        assert row["reward_max"] > row["reward_min"] > 0  # graded answers of differing length
    first, second = rows
    # Step 1 trains on what the initial weights played; step 2 on what they played while step
    # 1 trained: one update behind. ppo_kl is a mean of log-prob differences over a handful of
    # tokens and can come out negative, so its size is what shows the gap.
    assert abs(first["actor/ppo_kl"]) < SAME_POLICY_KL, first
    assert abs(second["actor/ppo_kl"]) > STALE_POLICY_KL, second
    assert "math_agent.py:run" in (tmp_path / "config.yaml").read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["backend"] == "verl" and summary["reported_steps"] == [1, 2]
