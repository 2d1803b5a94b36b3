"""The native trainer end to end on the tiny model: runs, artefacts, masks, every algorithm."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401  (registers the rllm/ ids)
import torch
from rllm_agents.agents.registry import agent_for_env
from rllm_agents.types import Episode, Step, Trajectory
from rllm_train import AgentTrainer
from rllm_train.cli import main
from rllm_train.config import ConfigError, build_config
from rllm_train.native.batch import episodes_to_sequences
from rllm_train.native.models import load_policy
from rllm_train.native.sampler import ExecutionSampler, PolicyServing, RolloutLimits
from rllm_train.native.trainer import NativeTrainer

from tests.train import reply_length
from tests.train.conftest import run_overrides

DEFAULT_TASK = "rllm/Arithmetic-v0"


def read_rows(output):
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_cli_end_to_end_run_writes_metrics_curve_checkpoint(tmp_path, tiny_model):
    output = tmp_path / "run"
    overrides = run_overrides(
        output,
        tiny_model,
        **{"trainer.val_every": 1, "trainer.val_tasks": 2, "trainer.save_every": 1},
    )
    code = main(["--env", DEFAULT_TASK] + [f"{key}={value}" for key, value in overrides.items()])
    assert code == 0
    rows = read_rows(output)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
        assert 0.0 <= row["reward_mean"] <= 1.0
        assert row["episodes"] == 4 and row["sequences"] == 4
        assert row["time/step_s"] >= row["time/generate_s"] > 0
        assert "val/reward_mean" in row
    assert (output / "reward_curve.png").stat().st_size > 1000
    assert list((output / "tensorboard").glob("events.out.tfevents.*"))
    assert (output / "checkpoints" / "latest").read_text().strip() == "step_2"
    # Saved after each step; by default only the newest is kept.
    assert [path.name for path in (output / "checkpoints").glob("step_*")] == ["step_2"]
    # Starting again on the same output without --resume is refused, not silently mixed.
    assert main(["--env", DEFAULT_TASK] + [f"{k}={v}" for k, v in overrides.items()]) == 2


def test_training_changes_the_weights(tmp_path, tiny_model):
    config = build_config(
        overrides=run_overrides(
            tmp_path / "run",
            tiny_model,
            **{"env.id": reply_length.MODULE_ENV_ID, "trainer.steps": 1, "rollout.n": 4},
        )
    )
    trainer = NativeTrainer(config)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    [row] = trainer.train()
    # Replies of different lengths within a group: the advantage cannot be zero, so the
    # update has a gradient to follow.
    assert row["reward_std"] > 0 and row["advantage_abs_mean"] > 0
    assert row["grad_norm"] > 0 and math.isfinite(row["loss"])
    changed = [
        name for name, p in trainer.model.named_parameters() if not torch.equal(p, before[name])
    ]
    assert len(changed) == len(before), "every weight takes part in the replies' log-probs"


def frozenlake_sampler(model_name: str, **limits) -> ExecutionSampler:
    model, tokenizer, _ = load_policy(
        build_config(overrides={"model.name": model_name}).model, torch.device("cpu")
    )
    return ExecutionSampler(
        PolicyServing.on_model(model, tokenizer, max_batch_size=8),
        lambda: gym.make("rllm/FrozenLake-v0"),
        agent_for_env("rllm/FrozenLake-v0"),
        RolloutLimits(**limits),
    )


def test_multi_turn_masks_exclude_env_tokens(tiny_model):
    sampler = frozenlake_sampler(tiny_model, max_turns=3, max_response_tokens=5)
    try:
        episodes = sampler.sample([3, 3], temperature=1.0, sampling_seed=0).episodes
    finally:
        sampler.close()
    for episode in episodes:
        trajectory = episode.trajectories[0]
        assert len(trajectory.steps) == 3  # random text is never a winning move in 3 turns
        ids, mask = trajectory.response_ids, trajectory.response_mask
        model_tokens = [token for token, flag in zip(ids, mask, strict=True) if flag]
        assert model_tokens == [t for step in trajectory.steps for t in step.response_ids]
        env_text = sampler.tokenizer.decode(
            [token for token, flag in zip(ids, mask, strict=True) if not flag]
        )
        # The env's replies (its observations) are in the sequence but masked out.
        assert "user" in env_text and str(trajectory.steps[1].observation)[:40] in env_text
        # Prefix consistency: each turn's prompt is the start of the whole sequence.
        whole = trajectory.prompt_ids + ids
        for step in trajectory.steps:
            assert whole[: len(step.prompt_ids)] == step.prompt_ids
        [sequence] = episodes_to_sequences([episode], ["g"], "trajectory")
        assert sum(sequence.loss_mask) == len(model_tokens)
        per_step = episodes_to_sequences([episode], ["g"], "step")
        assert [sum(s.loss_mask) for s in per_step] == [
            len(s.response_ids) for s in trajectory.steps
        ]


def test_prompt_budget_covers_the_whole_conversation(tiny_model):
    """rollout.max_prompt_tokens bounds every turn's prompt, not only the first one."""
    sampler = frozenlake_sampler(tiny_model, max_turns=4, max_response_tokens=5)
    try:
        [free] = sampler.sample([3], temperature=1.0, sampling_seed=0).episodes
        first, second = (len(step.prompt_ids) for step in free.trajectories[0].steps[:2])
        sampler.limits = RolloutLimits(
            max_turns=4, max_response_tokens=5, max_prompt_tokens=second - 1
        )
        [cut] = sampler.sample([3], temperature=1.0, sampling_seed=0).episodes
    finally:
        sampler.close()
    assert first < second
    assert cut.termination_reason.value == "prompt_too_long"
    assert len(cut.trajectories[0].steps) == 1


def test_every_trajectory_of_an_episode_is_trained_in_its_own_group():
    """Multi-agent episodes: one sequence per seat, its own reward, grouped per task and seat."""

    def seat(name: str, reward: float, consistent: bool) -> Trajectory:
        steps = [
            Step(prompt_ids=[1, 2], response_ids=[3, 4]),
            Step(prompt_ids=[1, 2, 3, 4, 5], response_ids=[6]),
        ]
        trajectory = Trajectory(name=name, steps=steps, reward=reward)
        if consistent:
            trajectory.prompt_ids, trajectory.response_ids = [1, 2], [3, 4, 5, 6]
            trajectory.response_mask = [1, 1, 0, 1]
        return trajectory

    episodes = [
        Episode(trajectories=[seat("solver", 1.0, True), seat("judge", 0.0, False)]),
        Episode(trajectories=[seat("solver", 0.0, True), seat("judge", 1.0, False)]),
    ]
    sequences = episodes_to_sequences(episodes, ["task-a", "task-a"], "trajectory")
    # The solver's conversations are one sequence each; the judge's (not prefix-consistent)
    # are trained turn by turn.
    assert [(s.group, s.reward, sum(s.loss_mask)) for s in sequences] == [
        ("task-a/solver", 1.0, 3),
        ("task-a/judge", 0.0, 2),
        ("task-a/judge", 0.0, 1),
        ("task-a/solver", 0.0, 3),
        ("task-a/judge", 1.0, 2),
        ("task-a/judge", 1.0, 1),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes",
    [
        {"algorithm.name": "ppo"},
        {"algorithm.name": "rloo", "algorithm.kl_coef": 0.1, "trainer.micro_batch_size": 1},
        {"algorithm.name": "reinforce_plus_plus", "model.lora_rank": 4, "algorithm.kl_coef": 0.1},
        {"algorithm.sequence_mode": "step", "trainer.ppo_epochs": 2},
    ],
    ids=["ppo-value-head", "rloo-kl-grad-accum", "reinforce++-lora-kl", "per-step-2-epochs"],
)
def test_every_algorithm_and_mode_trains(tmp_path, tiny_model, changes):
    overrides = run_overrides(
        tmp_path / "run",
        tiny_model,
        **{
            "env.id": "rllm/FrozenLake-v0",
            "rollout.max_turns": 2,
            "trainer.steps": 1,
            "rollout.temperature": 3.0,
            **changes,
        },
    )
    [row] = AgentTrainer(config=overrides).train()
    for key in ("loss", "pg_loss", "kl", "value_loss", "grad_norm"):
        assert math.isfinite(row[key]), key
    if changes.get("algorithm.kl_coef"):
        assert row["kl"] >= 0
    assert row["sequences"] == (8 if changes.get("algorithm.sequence_mode") == "step" else 4)


def test_existing_run_without_resume_is_refused_before_loading(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("step_1\n")
    config = build_config(overrides={"trainer.output": str(tmp_path), "model.name": "nowhere"})
    with pytest.raises(ConfigError, match="--resume"):
        NativeTrainer(config)


@pytest.mark.parametrize("old", ["execution", "lockstep"])
def test_the_old_rollout_engine_values_are_refused_with_their_replacement(old):
    with pytest.raises(ConfigError, match=f"rollout.engine={old}: .*use rollout.dispatch="):
        build_config(overrides={"rollout.engine": old})


@pytest.mark.slow
def test_async_dispatch_trains(tmp_path, tiny_model):
    overrides = run_overrides(
        tmp_path / "run",
        tiny_model,
        **{
            "env.id": "rllm/FrozenLake-v0",
            "rollout.dispatch": "async",
            "rollout.max_turns": 2,
            "trainer.steps": 1,
            "rollout.temperature": 3.0,
        },
    )
    trainer = NativeTrainer(build_config(overrides=overrides))
    [row] = trainer.train()
    assert math.isfinite(row["loss"]) and row["sequences"] == 4
    for episode in trainer.last_episodes:
        trajectory = episode.trajectories[0]
        model_tokens = [
            t for t, m in zip(trajectory.response_ids, trajectory.response_mask, strict=True) if m
        ]
        assert model_tokens == [t for step in trajectory.steps for t in step.response_ids]
        assert 0 in trajectory.response_mask  # the env's reply between the two turns


def test_ppos_value_head_learns_at_the_critic_rate_both_backends_share(tmp_path, tiny_model):
    overrides = run_overrides(
        tmp_path / "run",
        tiny_model,
        **{"algorithm.name": "ppo", "trainer.lr": 1e-4, "algorithm.critic_lr_scale": 3.0},
    )
    trainer = NativeTrainer(build_config(overrides=overrides))
    try:
        policy, critic = trainer.optimizer.param_groups
        assert policy["lr"] == pytest.approx(1e-4) and critic["lr"] == pytest.approx(3e-4)
        assert {id(p) for p in critic["params"]} == {id(p) for p in trainer.value_head.parameters()}
    finally:
        trainer.close()
