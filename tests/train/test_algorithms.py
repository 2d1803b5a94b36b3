"""The algorithms are verl's: advantages on a hand-computed group, the clipped loss, KL."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from rllm_train.algorithms import (
    AlgorithmSettings,
    compute_advantages,
    kl_to_reference,
    outcome_token_rewards,
    policy_loss,
)
from verl.trainer.ppo import core_algos

# Two tasks: group "a" with rewards 1, 0, 0, 1 and group "b" with 1, 0.
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
GROUPS = np.array(["a", "a", "a", "a", "b", "b"], dtype=object)
# Prompt tokens (0), model tokens (1), an env token between two turns (0), padding (0).
MASK = torch.tensor(
    [
        [0, 1, 1, 0, 1, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 1, 0, 0, 0, 0],
        [0, 1, 1, 1, 1, 1],
        [0, 1, 1, 0, 0, 0],
        [0, 0, 1, 0, 1, 1],
    ],
    dtype=torch.float32,
)


def test_outcome_reward_sits_on_the_last_model_token():
    token_rewards = outcome_token_rewards(REWARDS, MASK)
    assert token_rewards[0].tolist() == [0, 0, 0, 0, 1, 0]
    assert token_rewards[3].tolist() == [0, 0, 0, 0, 0, 1]
    assert token_rewards.sum().item() == REWARDS.sum().item()


def test_grpo_matches_hand_computation_and_verl():
    advantages, _ = compute_advantages(AlgorithmSettings("grpo"), REWARDS, MASK, GROUPS)
    # Group a: mean 0.5, sample std sqrt(1/3); group b: mean 0.5, sample std sqrt(1/2).
    a_scale = 0.5 / math.sqrt(1 / 3)
    b_scale = 0.5 / math.sqrt(1 / 2)
    expected = torch.tensor([a_scale, -a_scale, -a_scale, a_scale, b_scale, -b_scale])
    assert advantages == pytest.approx((expected[:, None] * MASK), abs=1e-4)
    verl_advantages, _ = core_algos.compute_grpo_outcome_advantage(
        outcome_token_rewards(REWARDS, MASK), MASK, GROUPS
    )
    assert torch.equal(advantages, verl_advantages)


def test_rloo_matches_hand_computation():
    advantages, _ = compute_advantages(AlgorithmSettings("rloo"), REWARDS, MASK, GROUPS)
    # Leave-one-out baseline: r_i - mean of the others.
    expected = torch.tensor([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3, 1.0, -1.0])
    assert advantages == pytest.approx((expected[:, None] * MASK), abs=1e-5)


def test_grpo_without_std_normalisation_is_reward_minus_group_mean():
    settings = AlgorithmSettings("grpo", norm_adv_by_std_in_grpo=False)
    advantages, _ = compute_advantages(settings, REWARDS, MASK, GROUPS)
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 0.5, -0.5])
    assert advantages == pytest.approx((expected[:, None] * MASK), abs=1e-6)


def test_env_tokens_get_no_advantage():
    for name in ("grpo", "rloo", "reinforce_plus_plus"):
        advantages, _ = compute_advantages(AlgorithmSettings(name), REWARDS, MASK, GROUPS)
        assert torch.all(advantages[MASK == 0] == 0), name


def test_ppo_needs_values_and_uses_gae():
    with pytest.raises(ValueError, match="value"):
        compute_advantages(AlgorithmSettings("ppo"), REWARDS, MASK, GROUPS)
    advantages, returns = compute_advantages(
        AlgorithmSettings("ppo"), REWARDS, MASK, GROUPS, values=torch.zeros_like(MASK)
    )
    assert torch.isfinite(advantages).all() and torch.isfinite(returns).all()
    # With zero values, gamma = lambda = 1, the return of every model token is the reward.
    assert returns[MASK == 1] == pytest.approx(
        REWARDS[:, None].expand_as(MASK)[MASK == 1], abs=1e-6
    )


def test_unknown_algorithm_is_named():
    with pytest.raises(ValueError, match="dpo"):
        compute_advantages(AlgorithmSettings("dpo"), REWARDS, MASK, GROUPS)


def test_policy_loss_on_policy_is_minus_mean_advantage_and_clips_off_policy():
    advantages = torch.tensor([[0.0, 1.0, -1.0, 2.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    logprobs = torch.tensor([[0.0, -1.0, -2.0, -0.5]])
    loss, metrics = policy_loss(AlgorithmSettings(), logprobs, logprobs, advantages, mask)
    assert loss.item() == pytest.approx(-(1 - 1 + 2) / 3)
    assert metrics["actor/pg_clipfrac"] == 0.0
    # Ratio e^1 on a positive advantage is clipped to 1.2: no incentive to push further.
    pushed = logprobs + torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    loss, metrics = policy_loss(AlgorithmSettings(), logprobs, pushed, advantages, mask)
    assert loss.item() == pytest.approx(-(1.2 - 1 + 2) / 3, abs=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / 3)


def test_kl_is_zero_at_the_reference_and_positive_away_from_it():
    mask = torch.ones(2, 3)
    logprobs = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.3, 0.3]]))
    assert kl_to_reference(AlgorithmSettings(), logprobs, logprobs, mask).item() == 0.0
    assert kl_to_reference(AlgorithmSettings(), logprobs, logprobs - 0.3, mask).item() > 0
