"""Thin adapters over verl's ``core_algos``, so the native and the verl backend compute the same thing.

Every tensor here is ``(batch, response_length)`` with a ``response_mask`` that is 1 on tokens
the model generated and 0 on padding and on env/chat tokens between turns.

* :func:`compute_advantages` runs a verl advantage estimator (GRPO, RLOO, REINFORCE++, GAE...)
  on outcome rewards placed on each sequence's last model token; :func:`given_advantages`
  places advantages computed per sequence elsewhere (role-conditioned baselines, which keep
  state across steps and so are not one of verl's estimators);
* :func:`policy_loss` runs a verl policy loss (``vanilla`` = PPO clip by default), with rollout
  correction's importance weights when given;
* :func:`kl_to_reference` is verl's KL penalty between the policy and a reference model;
* :func:`value_loss` is verl's clipped value loss (PPO's critic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from rllm_train.run.algorithm import algorithm

# verl's estimators that take settings beyond the shared config, as keyword arguments.
ESTIMATOR_OPTIONS: dict[str, Any] = {
    "grpo": lambda settings: {"norm_adv_by_std_in_grpo": settings.norm_adv_by_std_in_grpo},
}

KL_PENALTY_KINDS = ("kl", "abs", "mse", "low_var_kl", "full")


@dataclass(frozen=True)
class AlgorithmSettings:
    """The knobs of the algorithms (mirrors verl's ``algorithm``/``actor`` config names)."""

    name: str = "grpo"
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    policy_loss: str = "vanilla"
    loss_agg_mode: str = "token-mean"
    kl_penalty: str = "low_var_kl"
    cliprange_value: float = 0.5


def outcome_token_rewards(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each sequence's scalar reward placed on its last model-generated token (verl's layout)."""
    token_rewards = torch.zeros_like(response_mask, dtype=torch.float32)
    positions = torch.arange(response_mask.shape[1], device=response_mask.device)
    last = (positions * (response_mask > 0)).argmax(dim=1)
    has_tokens = response_mask.sum(dim=1) > 0
    rows = torch.arange(response_mask.shape[0], device=response_mask.device)[has_tokens]
    token_rewards[rows, last[has_tokens]] = rewards[has_tokens].float()
    return token_rewards


def compute_advantages(
    settings: AlgorithmSettings,
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) from verl's estimator for `settings.name`, both (batch, length)."""
    entry = algorithm(settings.name)
    if entry.estimator is None or not entry.runs_on("native"):
        raise ValueError(f"{settings.name} has no advantage estimator the native trainer runs")
    estimator = entry.estimator
    mask = response_mask.float()
    token_rewards = outcome_token_rewards(rewards, mask)
    if entry.learns_values:
        if values is None:
            raise ValueError("PPO (GAE) needs the value head's values")
        return core_algos.compute_gae_advantage_return(
            token_level_rewards=token_rewards,
            values=values.float(),
            response_mask=mask,
            gamma=torch.tensor(settings.gamma),
            lam=torch.tensor(settings.lam),
        )
    algo_config = OmegaConf.create(
        {"gamma": settings.gamma, "norm_adv_by_std_in_grpo": settings.norm_adv_by_std_in_grpo}
    )
    estimator_fn = core_algos.get_adv_estimator_fn(estimator)
    extra = ESTIMATOR_OPTIONS[estimator](settings) if estimator in ESTIMATOR_OPTIONS else {}
    return estimator_fn(
        token_level_rewards=token_rewards,
        response_mask=mask,
        index=np.asarray(group_ids),
        config=algo_config,
        **extra,
    )


def shared_trajectory_advantages(
    settings: AlgorithmSettings,
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: np.ndarray,
    trajectories: np.ndarray | None,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(advantages, returns) when some trajectory spans several sequences (a compacted
    episode): the outcome estimator runs once per trajectory - so a trajectory counts once in
    its group's baseline, however many sequences it took - and every sequence of it gets its
    trajectory's advantage. None when each row is its own trajectory, or for estimators that
    learn values (GAE then runs on each sequence, its reward on the sequence's last token)."""
    if trajectories is None or len(np.unique(trajectories)) == len(trajectories):
        return None
    if algorithm(settings.name).learns_values:
        return None
    _, first_rows, row_trajectory = np.unique(trajectories, return_index=True, return_inverse=True)
    one_token = torch.ones((len(first_rows), 1), dtype=torch.float32)
    per_trajectory, _ = compute_advantages(
        settings, rewards[first_rows], one_token, np.asarray(group_ids)[first_rows]
    )
    per_row = per_trajectory[:, 0][torch.as_tensor(row_trajectory)]
    return given_advantages(per_row, response_mask)


def given_advantages(
    advantages: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) for advantages computed per sequence outside verl (RAE: one
    value per trajectory), placed on every model token, as verl's outcome estimators do."""
    per_token = advantages.float().unsqueeze(-1) * response_mask.float()
    return per_token, per_token


def policy_loss(
    settings: AlgorithmSettings,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's policy loss `settings.policy_loss` (PPO clip by default) and its metrics.

    `rollout_is_weights` (rollout correction's per-token importance weights) multiply each
    token's loss inside verl's function, before aggregation, as verl's actor passes them.
    """
    actor_config = OmegaConf.create(
        {
            "clip_ratio": settings.clip_ratio,
            "clip_ratio_low": settings.clip_ratio_low,
            "clip_ratio_high": settings.clip_ratio_high,
            "clip_ratio_c": settings.clip_ratio_c,
            "loss_agg_mode": settings.loss_agg_mode,
            "global_batch_info": {},
        }
    )
    loss_fn = core_algos.get_policy_loss_fn(settings.policy_loss)
    weights = {} if rollout_is_weights is None else {"rollout_is_weights": rollout_is_weights}
    loss, metrics = loss_fn(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask.float(),
        loss_agg_mode=settings.loss_agg_mode,
        config=actor_config,
        **weights,
    )
    return loss, {key: float(value) for key, value in metrics.items()}


def kl_to_reference(
    settings: AlgorithmSettings,
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
) -> torch.Tensor:
    """Mean per-token KL penalty (verl's estimator `settings.kl_penalty`) over model tokens."""
    per_token = core_algos.kl_penalty(log_prob, ref_log_prob, settings.kl_penalty)
    return core_algos.agg_loss(per_token, response_mask.float(), settings.loss_agg_mode)


def value_loss(
    settings: AlgorithmSettings,
    predicted: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    response_mask: torch.Tensor,
) -> torch.Tensor:
    loss, _clipfrac = core_algos.compute_value_loss(
        vpreds=predicted,
        returns=returns,
        values=old_values,
        response_mask=response_mask.float(),
        cliprange_value=settings.cliprange_value,
        loss_agg_mode=settings.loss_agg_mode,
    )
    return loss
