"""Rollout correction (rllm_train.native.rollout_correction): importance weights and rejection
between the engine's log-probs and the trainer's, checked against hand-computed tensors, then
in real native steps on the tiny model."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from rllm_agents.types import Episode, Step, Trajectory
from rllm_train import algorithms
from rllm_train.config import ConfigError, build_config
from rllm_train.config.rollout_correction import RolloutCorrectionConfig
from rllm_train.native.batch import episodes_to_sequences, to_tensors
from rllm_train.native.behaviour_logprobs import POLICY_VERSION, trajectory_logprobs
from rllm_train.native.policy_update import CorrectionPlan
from rllm_train.native.rollout_correction import (
    apply,
    correct,
    samples_trained_weights,
    staleness_metrics,
)
from rllm_train.native.trainer import NativeTrainer

from tests.train import reply_length
from tests.train.conftest import run_overrides

E = math.e
# One sequence: a prompt token, then three model tokens whose trainer/engine log-ratios are
# 0, +1 and -1 (raw importance weights 1, e, 1/e).
TRAINER = torch.tensor([[0.0, -1.0, -0.5, -2.0]])
ENGINE = torch.tensor([[0.0, -1.0, -1.5, -1.0]])
MODEL_TOKENS = torch.tensor([[0.0, 1.0, 1.0, 1.0]])


def corrected(**settings):
    section = RolloutCorrectionConfig(**settings)
    return correct(section, TRAINER, ENGINE, MODEL_TOKENS, MODEL_TOKENS)


def test_token_level_truncated_is_cuts_weights_at_the_cap():
    result = corrected(rollout_is="token", rollout_is_threshold=2.0)
    assert torch.allclose(result.rollout_is_weights, torch.tensor([[1.0, 1.0, 2.0, 1 / E]]))
    assert torch.equal(result.loss_mask, MODEL_TOKENS)  # truncation rejects nothing
    m = result.metrics
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx((1 + 2 + 1 / E) / 3)
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(2.0)
    assert m["rollout_corr/rollout_is_min"] == pytest.approx(1 / E)
    assert m["rollout_corr/truncated_fraction"] == pytest.approx(1 / 3)
    assert m["rollout_corr/masked_fraction"] == 0.0
    assert m["rollout_corr/logprob_gap_mean"] == pytest.approx(2 / 3)
    assert m["rollout_corr/logprob_gap_max"] == pytest.approx(1.0)
    # |p_old - p_rollout| per token: |e^-1 - e^-1|, |e^-0.5 - e^-1.5|, |e^-2 - e^-1|.
    gaps = [0.0, math.exp(-0.5) - math.exp(-1.5), math.exp(-1) - math.exp(-2)]
    assert m["training/rollout_probs_diff_mean"] == pytest.approx(sum(gaps) / 3)
    assert m["training/rollout_probs_diff_max"] == pytest.approx(max(gaps))
    assert m["rollout_corr/kl"] == pytest.approx(0.0, abs=1e-7)  # k1: the +1 and -1 cancel
    assert m["rollout_corr/k3_kl"] == pytest.approx(((E - 2) + 1 / E) / 3)
    assert m["rollout_corr/corrected_tokens"] == 3 and m["rollout_corr/no_logprob_tokens"] == 0


def test_sequence_level_is_weighs_each_sequence_by_its_product_of_ratios():
    trainer = torch.tensor([[0.0, -1.0, -0.5, -2.0], [0.0, -1.0, -1.0, 0.0]])
    engine = torch.tensor([[0.0, -1.0, -1.5, -1.0], [0.0, -1.5, -1.5, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    section = RolloutCorrectionConfig(rollout_is="sequence", rollout_is_threshold=2.0)
    result = correct(section, trainer, engine, mask, mask)
    # Row 0: 0 + 1 - 1 = 0, weight 1. Row 1: 0.5 + 0.5 = 1, weight e, cut to 2.
    assert torch.allclose(
        result.rollout_is_weights, torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 2.0, 1.0]])
    )
    assert result.metrics["rollout_corr/truncated_fraction"] == pytest.approx(2 / 5)


def test_masked_is_zeroes_weights_outside_the_window():
    result = corrected(rollout_is="token", rollout_is_threshold="0.5_2.0")
    # e is above 2 and 1/e below 0.5: both weights become 0, the tokens stay in the mask.
    assert torch.allclose(result.rollout_is_weights, torch.tensor([[1.0, 1.0, 0.0, 0.0]]))
    assert torch.equal(result.loss_mask, MODEL_TOKENS)
    assert result.metrics["rollout_corr/masked_fraction"] == pytest.approx(2 / 3)
    assert result.metrics["rollout_corr/truncated_fraction"] == 0.0


def test_token_rejection_drops_tokens_beyond_the_ratio_bounds():
    result = corrected(rollout_is=None, rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0")
    # token_k1 keeps |log-ratio| <= log 2: only the token whose ratio is 1.
    assert result.rollout_is_weights is None
    assert torch.equal(result.loss_mask, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
    assert result.metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 3)
    assert result.metrics["rollout_corr/masked_fraction"] == pytest.approx(2 / 3)


def test_sequence_rejection_drops_a_whole_sequence():
    trainer = torch.tensor([[0.0, -1.0, -0.5, -2.0], [0.0, -1.0, -1.1, -0.9]])
    engine = torch.tensor([[0.0, -1.0, -1.5, -1.0], [0.0, -1.0, -1.0, -1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0]])
    section = RolloutCorrectionConfig(
        rollout_is=None, rollout_rs="seq_max_k2", rollout_rs_threshold=0.3
    )
    result = correct(section, trainer, engine, mask, mask)
    # k2 = r^2 / 2: row 0 peaks at 0.5 (rejected), row 1 at 0.005 (kept).
    assert torch.equal(result.loss_mask, torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]]))
    assert result.metrics["rollout_corr/masked_fraction"] == pytest.approx(3 / 6)


def test_tokens_without_an_engine_logprob_are_left_uncorrected_and_counted():
    known = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # the +1 token has no engine log-prob
    section = RolloutCorrectionConfig(
        rollout_is="token",
        rollout_is_threshold=2.0,
        rollout_rs="token_k1",
        rollout_rs_threshold="0.5_2.0",
    )
    result = correct(section, TRAINER, ENGINE, known, MODEL_TOKENS)
    assert torch.allclose(result.rollout_is_weights, torch.tensor([[1.0, 1.0, 1.0, 1 / E]]))
    assert torch.equal(result.loss_mask, torch.tensor([[0.0, 1.0, 1.0, 0.0]]))  # kept: uncorrected
    m = result.metrics
    assert m["rollout_corr/corrected_tokens"] == 2 and m["rollout_corr/no_logprob_tokens"] == 1
    assert m["rollout_corr/no_logprob_fraction"] == pytest.approx(1 / 3)
    assert m["rollout_corr/logprob_gap_mean"] == pytest.approx(0.5)
    assert m["rollout_corr/masked_fraction"] == pytest.approx(1 / 2)


def test_staleness_histogram_counts_sequences_by_version_lag():
    metrics = staleness_metrics(torch.tensor([3, 3, 1, 0]), current_version=3)
    assert metrics == {
        "rollout_corr/staleness/lag_0": 2.0,
        "rollout_corr/staleness/lag_2": 1.0,
        "rollout_corr/staleness/lag_3": 1.0,
        "rollout_corr/staleness_mean": 1.25,
        "rollout_corr/staleness_max": 3.0,
    }


def test_policy_loss_multiplies_each_token_by_its_weight():
    logprobs = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    settings = algorithms.AlgorithmSettings()
    plain, _ = algorithms.policy_loss(settings, logprobs, logprobs, torch.ones(1, 2), mask)
    weighted, _ = algorithms.policy_loss(
        settings, logprobs, logprobs, torch.ones(1, 2), mask, torch.tensor([[2.0, 0.5]])
    )
    # On-policy, advantage 1: each token's loss is -1; token-mean of -2 and -0.5.
    assert plain.item() == pytest.approx(-1.0)
    assert weighted.item() == pytest.approx(-1.25)


def turn(prompt, response, logprobs=None, **info):
    return Step(prompt_ids=prompt, response_ids=response, logprobs=logprobs or [], info=info)


def test_engine_logprobs_reach_the_batch_at_their_tokens():
    # Two turns with an env reply (tokens 7, 8) between them; the second turn's engine reported
    # no log-probs. 0.0 is a real log-prob and must stay one.
    trajectory = Trajectory(
        steps=[turn([1, 2], [3, 4], [-0.1, 0.0]), turn([1, 2, 3, 4, 7, 8], [5, 6])],
        prompt_ids=[1, 2],
        response_ids=[3, 4, 7, 8, 5, 6],
        response_mask=[1, 1, 0, 0, 1, 1],
        response_logprobs=[-0.1, 0.0, 0.0, 0.0, 0.0, 0.0],
        info={POLICY_VERSION: 2},
    )
    assert trajectory_logprobs(trajectory) == [-0.1, 0.0, None, None, None, None]
    episode = Episode(trajectories=[trajectory])
    [sequence] = episodes_to_sequences([episode], ["g"], "trajectory")
    batch = to_tensors([sequence, dataclasses.replace(sequence, policy_version=None)], 0, 5)
    assert batch.rollout_logprob_mask[0].tolist() == [0, 0, 1, 1, 0, 0, 0, 0]
    assert batch.rollout_logprobs[0, 2:4].tolist() == pytest.approx([-0.1, 0.0])
    assert batch.policy_versions.tolist() == [2, 5]  # its own, else the step's
    per_step = episodes_to_sequences([episode], ["g"], "step")
    assert [s.rollout_logprobs for s in per_step] == [
        [None, None, -0.1, 0.0],
        [None] * 8,
    ]


def test_turns_that_cannot_be_placed_leave_their_tokens_without_logprobs():
    # The first turn came from a text-only engine: re-tokenised, its ids are not the step's.
    trajectory = Trajectory(
        steps=[turn([1], [], [-0.3]), turn([1, 3, 9], [5], [-0.2])],
        prompt_ids=[1],
        response_ids=[3, 9, 5],
        response_mask=[1, 0, 1],
    )
    assert trajectory_logprobs(trajectory) == [None, None, -0.2]


def test_correction_off_where_the_batch_has_no_engine_logprobs_reports_coverage():
    batch = to_tensors(
        episodes_to_sequences(
            [Episode(trajectories=[Trajectory(steps=[turn([1], [2, 3])])])], ["g"], "step"
        ),
        0,
    )
    same, metrics = apply(RolloutCorrectionConfig(), batch, None, current_version=0)
    assert same is batch
    assert metrics["rollout_corr/no_logprob_tokens"] == 2
    assert metrics["rollout_corr/staleness/lag_0"] == 1


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("enabled=sometimes", "enabled"),
        ("rollout_is=tokens", "rollout_is:"),
        ("rollout_is_threshold=0.9", "truncation cap"),
        ("rollout_is_threshold=2.0_4.0", "window must hold 1"),
        ("rollout_rs=token_k3", "needs a threshold"),
    ],
)
def test_bad_values_are_named(override, named):
    with pytest.raises(ConfigError, match=named):
        build_config(overrides=[f"algorithm.rollout_correction.{override}"])


def test_verl_refuses_unknown_rejection_options_before_a_model_loads(tmp_path):
    config = build_config(
        overrides={
            "trainer.output": str(tmp_path),
            "model.name": "nowhere",
            "algorithm.rollout_correction.rollout_rs": "token_k9",
            "algorithm.rollout_correction.rollout_rs_threshold": 2.0,
        }
    )
    with pytest.raises(ConfigError, match="rollout_correction.*token_k9"):
        NativeTrainer(config)


def test_the_section_reads_from_yaml_and_flags(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "algorithm:\n  rollout_correction:\n    enabled: on\n    rollout_is_threshold: 0.5_2.0\n"
    )
    config = build_config(path, ["algorithm.rollout_correction.rollout_is=sequence"])
    section = config.algorithm.rollout_correction
    assert (section.enabled, section.rollout_is, section.rollout_is_threshold) == (
        True,
        "sequence",
        "0.5_2.0",
    )


class ShiftedSampler:
    """Plays through the trainer's own sampler, then reports engine log-probs lowered by
    `shift` on the first `shifted` episodes, stamped one policy version old - an engine that
    is not the trainer, as far as the correction can tell."""

    def __init__(self, inner, shift: float, shifted: int, version: int) -> None:
        self.inner, self.shift, self.shifted, self.version = inner, shift, shifted, version

    def sample(self, seeds, temperature, sampling_seed, **rows):
        rollout = self.inner.sample(seeds, temperature, sampling_seed, **rows)
        for episode in rollout.episodes[: self.shifted]:
            for trajectory in episode.trajectories:
                trajectory.info[POLICY_VERSION] = self.version
                for step in trajectory.steps:
                    step.logprobs = [value - self.shift for value in step.logprobs]
        return rollout

    def close(self) -> None:
        self.inner.close()


def model_token_count(episodes) -> int:
    return sum(len(s.response_ids) for e in episodes for t in e.trajectories for s in t.steps)


def test_native_steps_correct_a_foreign_engine_and_not_their_own(tmp_path, tiny_model, monkeypatch):
    policy_loss = algorithms.policy_loss
    overrides = run_overrides(
        tmp_path / "run",
        tiny_model,
        **{
            "env.id": reply_length.MODULE_ENV_ID,  # rewards differ: the update has a gradient
            "rollout.tasks_per_step": 1,
            "rollout.n": 4,
            "trainer.steps": 4,
            "rollout.temperature": 2.0,  # the engine scores at 2: so must the correction
            "trainer.micro_batch_size": 2,
            "algorithm.rollout_correction.rollout_rs": "token_k1",
            "algorithm.rollout_correction.rollout_rs_threshold": "0.5_2.0",
        },
    )
    trainer = NativeTrainer(build_config(overrides=overrides))
    try:
        own = trainer.train_step(0)  # auto: the sampler serves the trained model itself
        assert samples_trained_weights(trainer.sampler, trainer.model)
        assert not [key for key in own if key.startswith("rollout_corr/")]
        native = trainer.sampler

        trainer.completed_steps = 1
        trainer.sampler = ShiftedSampler(native, shift=0.0, shifted=0, version=0)
        same = trainer.train_step(1)  # another sampler: auto turns the correction on
        tokens = model_token_count(trainer.last_episodes)
        assert math.isfinite(same["loss"]) and same["grad_norm"] > 0
        assert same["rollout_corr/corrected_tokens"] == tokens
        assert same["rollout_corr/logprob_gap_max"] < 1e-4
        assert same["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-4)
        assert same["rollout_corr/masked_fraction"] == 0.0
        assert same["rollout_corr/staleness/lag_0"] == 4

        trainer.completed_steps = 2
        trainer.sampler = ShiftedSampler(native, shift=1.0, shifted=2, version=1)
        moved = trainer.train_step(2)
        # The first two episodes' engine log-probs are 1 lower: log-ratio +1 on each of their
        # tokens, beyond token_k1's bounds (|log-ratio| <= log 2), so those tokens leave the
        # loss; the other two keep weights of 1.
        shifted = model_token_count(trainer.last_episodes[:2])
        total = model_token_count(trainer.last_episodes)
        assert math.isfinite(moved["loss"]) and moved["sequences_trained"] <= 4
        assert moved["rollout_corr/masked_fraction"] == pytest.approx(shifted / total)
        assert moved["rollout_corr/logprob_gap_max"] == pytest.approx(1.0, abs=1e-4)
        assert moved["rollout_corr/logprob_gap_mean"] == pytest.approx(shifted / total, abs=1e-4)
        # e is cut to 2 on the shifted tokens (weights are computed before the rejection).
        expected_mean = (2.0 * shifted + (total - shifted)) / total
        assert moved["rollout_corr/rollout_is_mean"] == pytest.approx(expected_mean, abs=1e-4)
        assert moved["rollout_corr/truncated_fraction"] == pytest.approx(shifted / total)
        assert moved["rollout_corr/staleness/lag_1"] == 2
        assert moved["rollout_corr/staleness/lag_0"] == 2

        # Without rejection the shifted tokens stay, weighted 2 in verl's policy loss.
        trainer.config.algorithm.rollout_correction.rollout_rs = None
        passed = []

        def spy(*args, **kwargs):
            passed.append(kwargs["rollout_is_weights"])
            return policy_loss(*args, **kwargs)

        monkeypatch.setattr(algorithms, "policy_loss", spy)
        trainer.completed_steps = 3
        weighted = trainer.train_step(3)
        assert weighted["rollout_corr/masked_fraction"] == 0.0
        assert weighted["sequences_trained"] == 4
        weights = torch.cat([w.flatten() for w in passed])
        assert weights.max().item() == pytest.approx(2.0)
        assert weights.min().item() == pytest.approx(1.0, abs=1e-4)
    finally:
        trainer.close()


def test_one_epoch_scores_the_engines_tokens_in_the_training_pass_itself(
    tmp_path, tiny_model, monkeypatch
):
    """Token-level truncated IS (the default) with one epoch takes the trainer's log-probs from
    the update's own forward pass: the same weights and metrics as scoring in a pass of its
    own, at half the forward passes."""
    overrides = run_overrides(
        tmp_path / "run",
        tiny_model,
        **{
            "env.id": reply_length.MODULE_ENV_ID,
            "rollout.tasks_per_step": 1,
            "rollout.n": 4,
            "rollout.temperature": 2.0,
            "trainer.micro_batch_size": 2,
            "algorithm.rollout_correction.rollout_is_threshold": 1.5,  # some weights cut
        },
    )

    def corrected_step(score_in_update: bool):
        trainer = NativeTrainer(build_config(overrides=overrides))
        if not score_in_update:  # the correction scored in a pass of its own, before
            monkeypatch.setattr(
                CorrectionPlan, "decide", classmethod(lambda cls, *args: cls(on=True))
            )
        passes = []
        trainer.model.register_forward_hook(lambda *_: passes.append(1))
        try:
            trainer.sampler = ShiftedSampler(trainer.sampler, shift=0.6, shifted=2, version=0)
            trainer.completed_steps = 1
            sampled_before = len(passes)
            row = trainer.train_step(1)
            weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
            return row, weights, len(passes) - sampled_before
        finally:
            trainer.close()
            monkeypatch.undo()

    fused, fused_weights, fused_passes = corrected_step(True)
    apart, apart_weights, apart_passes = corrected_step(False)
    assert fused["rollout_corr/truncated_fraction"] > 0  # the weights really differ from 1
    for key in ("rollout_is_mean", "rollout_is_max", "logprob_gap_mean", "truncated_fraction"):
        assert fused[f"rollout_corr/{key}"] == pytest.approx(
            apart[f"rollout_corr/{key}"], abs=1e-5
        ), key
    assert fused["rollout_corr/staleness/lag_1"] == apart["rollout_corr/staleness/lag_1"] == 2
    for name, tensor in fused_weights.items():
        torch.testing.assert_close(tensor, apart_weights[name], atol=1e-6, rtol=0)
    micro_batches = 2  # 4 sequences, 2 a micro-batch
    assert apart_passes - fused_passes == micro_batches


class SameRewards(ShiftedSampler):
    """A foreign engine (as ShiftedSampler) whose episodes all earn the same reward: every
    GRPO group then has advantages of 0."""

    def sample(self, seeds, temperature, sampling_seed, **rows):
        rollout = super().sample(seeds, temperature, sampling_seed, **rows)
        for episode in rollout.episodes:
            for trajectory in episode.trajectories:
                trajectory.reward = 1.0
        return rollout


def test_an_update_left_with_no_rows_still_reports_its_correction(tmp_path, tiny_model):
    """A correction scored in the update's own pass, and drop_zero_advantage leaving no row to
    pass: the update returned correction metrics it never set (UnboundLocalError)."""
    overrides = run_overrides(
        tmp_path / "run",
        tiny_model,
        **{"rollout.tasks_per_step": 1, "rollout.n": 4, "algorithm.drop_zero_advantage": True},
    )
    trainer = NativeTrainer(build_config(overrides=overrides))
    try:
        trainer.sampler = SameRewards(trainer.sampler, shift=0.0, shifted=0, version=0)
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        row = trainer.train_step(0)
        assert row["sequences_trained"] == 0 and row["loss"] == 0.0
        assert row["advantage_abs_mean"] == 0.0
        for name, tensor in trainer.model.state_dict().items():  # no step was taken
            assert torch.equal(tensor, before[name]), name
    finally:
        trainer.close()
