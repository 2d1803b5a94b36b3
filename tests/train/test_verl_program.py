"""``rllm-train --backend verl`` trains an agent program: the ``openai``-SDK example agent
(examples/gateway/math_agent.py), unchanged, inside verl's own trainer on this CPU.

verl's agent-loop worker runs ``RllmProgramLoop``: the program talks to a gateway in the worker,
whose engine is verl's rollout server (rllm's LocalEngine holding the weights verl synced), and
each run's recorded tokens become the sample verl trains. The env is rllm/Math-v0 rewarded by
the answer's length (tests/train/reply_length.py), so a task's samples differ in reward and
every GRPO update has a gradient.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.train.reply_length import MATH_MODULE_ENV_ID
from tests.train.test_verl_training import assert_trained, rllm_train, trained_rows, verl_trainer

pytestmark = pytest.mark.slow
__all__ = ["verl_trainer"]  # the module's fixture: skips without Ray

EXAMPLES = Path(__file__).parents[2] / "examples" / "gateway"


def test_the_example_agent_program_trains_on_verl(tmp_path, verl_ray_head):
    rllm_train(
        tmp_path,
        "--env", MATH_MODULE_ENV_ID,
        "--agent-program", "examples/gateway/math_agent.py:run",  # relative: the workers resolve it
        f"data.train={EXAMPLES / 'addition_train.jsonl'}",
        "--steps", "2",
        ray_address=verl_ray_head.address(),
    )  # fmt: skip
    rows = trained_rows(tmp_path)
    # Finite, non-zero grad norms; rollout correction's metrics in metrics.jsonl; the engine's
    # log-probs equal the trainer's (it serves the synced weights through the gateway).
    assert_trained(rows, steps=2)
    for row in rows:
        assert row["response_tokens_mean"] > 0
        assert row["num_turns_mean"] >= 3  # at least one model call per run, none failed
        assert row["reward_max"] > row["reward_min"] > 0  # graded answers of differing length
    assert "math_agent.py:run" in (tmp_path / "config.yaml").read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["backend"] == "verl" and summary["reported_steps"] == [1, 2]
