"""Training on compacted episodes: a native run with compaction has finite non-zero gradients;
every sequence of an episode gets the episode's advantage, the episode counting once in its
group; what a backend or mode cannot do with compaction is refused with the reason."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from rllm_agents.types import Episode, TerminationReason, TokenSequence, Trajectory
from rllm_train import algorithms
from rllm_train.cli import main
from rllm_train.config import ConfigError, build_config
from rllm_train.native.batch import episodes_to_sequences, to_tensors

from tests.train.reply_length import LAKE_MODULE_ENV_ID


@pytest.mark.slow
def test_native_training_on_compacted_episodes_has_a_gradient(tmp_path):
    output = tmp_path / "run"
    code = main(
        ["--env", LAKE_MODULE_ENV_ID, "env.kwargs.size=8", "--model", "tiny", "--steps", "2",
         "--no-progress", "--output", str(output), "rollout.tasks_per_step=2", "rollout.n=2",
         "rollout.max_response_tokens=10", "rollout.max_turns=10",
         "rollout.max_prompt_tokens=500", "rollout.compaction.policy=summarize",
         "rollout.compaction.summary_tokens=24", "trainer.save_every=0",
         "trainer.validate_held_out=false", "trainer.lr=1e-3"]
    )  # fmt: skip
    assert code == 0
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "reward_mean" in row]
    assert [row["step"] for row in trained] == [1, 2]
    for row in trained:
        assert row["failed_episodes"] == 0 and row["episodes"] == 4
        assert row["compacted_episodes"] == 4 and row["compactions"] >= 4
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0


def compacted(reward: float, sequences: int) -> Episode:
    pieces = [
        TokenSequence([1, 2], [3, 4, 5], [1, 0, 1], [0.0, 0.0, 0.0]) for _ in range(sequences)
    ]
    trajectory = Trajectory(reward=reward, sequences=pieces if sequences > 1 else [])
    if sequences == 1:
        trajectory.prompt_ids, trajectory.response_ids = [1, 2], [3, 4, 5]
        trajectory.response_mask, trajectory.response_logprobs = [1, 0, 1], [0.0] * 3
    return Episode(trajectories=[trajectory], termination_reason=TerminationReason.ENV_DONE)


def test_every_sequence_of_an_episode_shares_its_advantage_and_it_counts_once():
    # One task, two episodes: reward 1 in three sequences, reward 0 in one.
    episodes = [compacted(1.0, 3), compacted(0.0, 1)]
    sequences = episodes_to_sequences(episodes, ["task", "task"], "trajectory")
    assert [s.trajectory for s in sequences] == [0, 0, 0, 1]
    batch = to_tensors(sequences, pad_id=0)
    settings = algorithms.AlgorithmSettings(name="grpo")
    advantages, _ = algorithms.shared_trajectory_advantages(
        settings, batch.rewards, batch.loss_mask, batch.groups, batch.trajectories
    )
    per_row = advantages.sum(dim=1) / batch.loss_mask.sum(dim=1)
    # GRPO over the two episodes (not four rows): +1/-1 std-normalised, 0.7071 each way.
    expected = 1 / math.sqrt(2)
    assert torch.allclose(per_row, torch.tensor([expected] * 3 + [-expected]), atol=1e-4)
    # Rows that are their own trajectories: the estimator as usual.
    single = np.arange(4)
    assert (
        algorithms.shared_trajectory_advantages(
            settings, batch.rewards, batch.loss_mask, batch.groups, single
        )
        is None
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trainer.backend": "verl"}, "verl's agent loop makes one training sequence per sample"),
        ({"program.function": "my_agent:run"}, "agent program manages its own context"),
        ({"rollout.compaction.policy": "forget"}, "unknown compaction policy 'forget'"),
        ({"rollout.compaction.policy": "summarize_with"}, "summary_model"),
        ({"env.id": "kuhn_poker_v0"}, "multi-agent games"),
    ],
    ids=["verl", "program", "unknown", "no-summary-model", "multiagent"],
)
def test_what_cannot_compact_is_refused_with_the_reason(changes, message):
    overrides = {
        "env.id": "rllm/FrozenLake-v0",
        "rollout.max_turns": 8,
        "rollout.compaction.policy": "last_turns",
    }
    with pytest.raises(ConfigError, match=message):
        build_config(overrides={**overrides, **changes})


def test_a_gateway_split_session_is_one_unit_of_advantage():
    # An agent program's session the gateway split into two sequences (info["sequence"]),
    # and a plain episode beside it: two units, as a compacted episode and another would be.
    split = compacted(1.0, 1)
    second = Trajectory(
        reward=1.0, prompt_ids=[1], response_ids=[2, 3], response_mask=[1, 1],
        response_logprobs=[0.0, 0.0], info={"sequence": 1},
    )  # fmt: skip
    split.trajectories[0].info["sequence"] = 0
    split.trajectories.append(second)
    sequences = episodes_to_sequences([split, compacted(0.0, 1)], ["task", "task"], "trajectory")
    assert [s.trajectory for s in sequences] == [0, 0, 2]
