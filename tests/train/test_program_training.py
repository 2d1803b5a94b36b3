"""``rllm-train`` trains an agent program: the ``openai``-SDK example agent (examples/gateway),
unchanged, on the tiny model through the gateway - as a function and as a command.

The env is rllm/Math-v0 rewarded by the answer's length (tests/train/reply_length.py): the tiny
random model never answers right, and GRPO needs samples of a task that differ in reward.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
from rllm_train.cli import main
from rllm_train.config import build_config
from rllm_train.native.program_sampler import ProgramSampler
from rllm_train.native.trainer import NativeTrainer

from tests.train import reply_length
from tests.train.conftest import run_overrides

EXAMPLES = Path(__file__).parents[2] / "examples" / "gateway"
TASKS = str(EXAMPLES / "addition_train.jsonl")


def program_overrides(output: Path, model: str, **changes) -> dict:
    return run_overrides(
        output,
        model,
        **{"env.id": reply_length.MATH_MODULE_ENV_ID, "data.train": TASKS, **changes},
    )


def test_the_example_agent_trains_and_its_weights_change(tmp_path, tiny_model):
    config = build_config(
        overrides=program_overrides(
            tmp_path / "run",
            tiny_model,
            **{"program.function": f"{EXAMPLES / 'math_agent.py'}:run", "rollout.n": 4},
        )
    )
    trainer = NativeTrainer(config)
    assert isinstance(trainer.sampler, ProgramSampler)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    rows = trainer.train()
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["episodes"] == 8 and row["failures"] == row["errors"] == 0
        assert row["sequences"] == 8  # one call per run: one sequence each
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
        assert row["response_tokens_mean"] > 0
    assert any(row["reward_std"] > 0 and row["grad_norm"] > 0 for row in rows)
    changed = [
        name for name, p in trainer.model.named_parameters() if not torch.equal(p, before[name])
    ]
    assert len(changed) == len(before)
    # The episodes it trained on: the agent's own call, the answer graded by the env.
    for episode in trainer.last_episodes:
        [trajectory] = episode.trajectories
        assert 1 <= sum(trajectory.response_mask) <= 6  # rollout.max_response_tokens
        assert trajectory.reward == episode.reward == len(episode.info["answer"]) / 50


def test_rllm_train_takes_the_agent_as_a_command(tmp_path, tiny_model):
    output = tmp_path / "run"
    overrides = program_overrides(output, tiny_model, **{"trainer.steps": 1})
    command = f"{sys.executable} {EXAMPLES / 'math_agent_cli.py'}"
    argv = ["--agent-cmd", command, *(f"{key}={value}" for key, value in overrides.items())]
    assert main(argv) == 0
    [row] = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert row["episodes"] == 4 and row["errors"] == 0 and row["sequences"] == 4
    assert math.isfinite(row["loss"])
    saved = (output / "config.yaml").read_text()
    assert "math_agent_cli.py" in saved  # the run's config names its program
