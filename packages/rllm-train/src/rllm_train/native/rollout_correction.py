"""Rollout correction: importance weights and rejection between the rollout engine and the trainer.

The policy gradient assumes the tokens were sampled from the policy being trained. They were
sampled by the rollout engine, whose log-probs can differ from the trainer's for the same
weights (other kernels, precision or quantisation: llama.cpp, vLLM) or whose weights are a few
updates old (an asynchronous sampler). Following verl's ``rollout_correction`` (its decoupled
mode, three policies), the update

1. scores the batch with the trainer's weights before the update (``pi_old``, at the sampling
   temperature, as the engine scored it),
2. hands ``pi_old`` and the engine's log-probs (``pi_rollout``) to verl's
   ``compute_rollout_correction_and_rejection_mask``: importance weights ``pi_old / pi_rollout``
   per token or per sequence, truncated at a cap (TIS) or zeroed outside a window (IcePop), and
   a rejection mask from divergence thresholds,
3. multiplies each token's policy loss by its weight (verl's policy losses take
   ``rollout_is_weights``) and leaves rejected tokens out of every loss term, as verl does with
   its ``response_mask``. Advantages are computed before the rejection, so a rejected sample
   still counts in its group's baseline (verl's outcome estimators also see it).

Trained tokens the engine gave no log-prob for (``TensorBatch.rollout_logprob_mask`` 0) are not
corrected - weight 1, never rejected - and counted (``rollout_corr/no_logprob_tokens``).
Sequence-level statistics (a sequence's weight, ``seq_*`` rejection) run over its tokens that
have one.

Metrics go to ``metrics.jsonl`` under ``rollout_corr/``: verl's (``rollout_is_mean``/``_min``/
``_max``/``_std``, ``rollout_is_eff_sample_size``, ``rollout_rs_masked_fraction``, ``kl`` (k1),
``k3_kl``, perplexities, chi-squared) and this module's (log-prob gap, truncated and masked
fractions, coverage, the staleness histogram by policy-version lag), plus verl's probability
gap ``training/rollout_probs_diff_mean``/``_max``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from rllm_agents.engines.local import LocalEngine
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask
from verl.utils.debug.metrics import calculate_log_prob_diff

from rllm_train.config import ConfigError
from rllm_train.config.rollout_correction import AUTO, RolloutCorrectionConfig, ratio_bounds
from rllm_train.native.batch import TensorBatch

PREFIX = "rollout_corr/"

# Whether correction runs, from `enabled` and whether the engine samples the trained weights
# themselves (then both score the same weights with the same code: nothing to correct).
ENABLED_BY: dict[bool | str, Callable[[bool], bool]] = {
    AUTO: lambda shares_weights: not shares_weights,
    True: lambda shares_weights: True,
    False: lambda shares_weights: False,
}


def samples_trained_weights(sampler: Any, model: Any) -> bool:
    """Whether `sampler` generates with a LocalEngine serving `model` itself, in this process
    (the native samplers do; a sampler on another engine, process or copy does not). No sampler
    yet: nothing was sampled elsewhere."""
    if sampler is None:
        return True
    engine = getattr(sampler, "engine", None)
    return isinstance(engine, LocalEngine) and engine.model is model


def correction_enabled(section: RolloutCorrectionConfig, shares_weights: bool) -> bool:
    return ENABLED_BY[section.enabled](shares_weights)


def scoring_temperature(temperature: float) -> float:
    """The temperature the engine's log-probs are under: ``log_softmax(logits / T)``, and the
    plain softmax when sampling greedily (T = 0)."""
    return temperature if temperature > 0 else 1.0


def check_with_verl(section: RolloutCorrectionConfig) -> None:
    """Run verl's own checks of the settings on a one-token batch, so a value verl refuses (a
    rejection option it does not know, a threshold of the wrong form) fails before a model
    loads, naming the section."""
    if section.is_level is None and section.rs_options is None:
        return
    zeros = torch.zeros((1, 1))
    try:
        compute_rollout_correction_and_rejection_mask(
            old_log_prob=zeros,
            rollout_log_prob=zeros,
            response_mask=torch.ones((1, 1)),
            **_verl_arguments(section),
        )
    except (ValueError, TypeError) as error:
        raise ConfigError(f"algorithm.rollout_correction: verl refuses it: {error}") from None


def _verl_arguments(section: RolloutCorrectionConfig) -> dict[str, Any]:
    return {
        "rollout_is": section.is_level,
        "rollout_is_threshold": section.rollout_is_threshold,
        "rollout_is_batch_normalize": section.rollout_is_batch_normalize,
        "rollout_rs": section.rs_options,
        "rollout_rs_threshold": section.rollout_rs_threshold,
    }


@dataclass
class Correction:
    """What the update uses: the loss mask after rejection, the per-token weights (1 where
    nothing is corrected; None when importance weights are off) and the metrics."""

    loss_mask: torch.Tensor
    rollout_is_weights: torch.Tensor | None
    metrics: dict[str, float]


def correct(
    section: RolloutCorrectionConfig,
    trainer_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    rollout_logprob_mask: torch.Tensor,
    loss_mask: torch.Tensor,
) -> Correction:
    """Weights and rejection for the trained tokens that have an engine log-prob (module doc).

    All tensors are (batch, length), log-probs at their token's position.
    """
    corrected = (rollout_logprob_mask > 0) & (loss_mask > 0)
    metrics = coverage_metrics(corrected, loss_mask)
    rows = corrected.any(dim=1).nonzero().squeeze(-1)
    if rows.numel() == 0:
        return Correction(loss_mask, None, metrics)
    # Only rows with corrected tokens go to verl: its per-sequence statistics (perplexities,
    # sequence weights) would count an empty row as a sequence of weight 0.
    mask = corrected[rows].float()
    old, behaviour = trainer_logprobs[rows].float(), rollout_logprobs[rows].float()
    weights, kept, verl_metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old, rollout_log_prob=behaviour, response_mask=mask, **_verl_arguments(section)
    )
    metrics.update(verl_metrics)
    log_ratio = (old - behaviour) * mask
    metrics.update(gap_metrics(old, behaviour, mask))
    new_mask = loss_mask.clone()
    new_mask[rows] = torch.where(mask > 0, kept.to(loss_mask.dtype), loss_mask[rows])
    full_weights = None
    removed = mask - kept.float()  # rejected
    if weights is not None:
        token_weights = weights.batch["rollout_is_weights"].float()
        full_weights = torch.ones_like(loss_mask, dtype=torch.float32)
        full_weights[rows] = torch.where(mask > 0, token_weights, torch.ones_like(token_weights))
        removed = torch.maximum(removed, ((token_weights == 0) & (mask > 0)).float())
        metrics[f"{PREFIX}truncated_fraction"] = truncated_fraction(section, log_ratio, mask)
    metrics[f"{PREFIX}masked_fraction"] = float(removed.sum() / mask.sum())
    return Correction(new_mask, full_weights, metrics)


def coverage_metrics(corrected: torch.Tensor, loss_mask: torch.Tensor) -> dict[str, float]:
    """How many trained tokens have an engine log-prob to be corrected with, how many not."""
    trained = float((loss_mask > 0).sum())
    covered = float(corrected.sum())
    return {
        f"{PREFIX}corrected_tokens": covered,
        f"{PREFIX}no_logprob_tokens": trained - covered,
        f"{PREFIX}no_logprob_fraction": (trained - covered) / trained if trained else 0.0,
    }


def gap_metrics(old: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The per-token log-prob gap |log pi_old - log pi_rollout| (mean, largest), and the
    probability gap |pi_old - pi_rollout| under the names verl's trainer logs it with (the verl
    backend's runs carry them too, so the two backends' rows compare)."""
    gap = (old - behaviour).abs() * mask
    probability_gap = calculate_log_prob_diff(old.exp(), behaviour.exp(), mask.bool())
    return {
        f"{PREFIX}logprob_gap_mean": float(gap.sum() / mask.sum()),
        f"{PREFIX}logprob_gap_max": float(gap.max()),
        "training/rollout_probs_diff_mean": float(probability_gap.mean()),
        "training/rollout_probs_diff_max": float(probability_gap.max()),
    }


def truncated_fraction(
    section: RolloutCorrectionConfig, log_ratio: torch.Tensor, mask: torch.Tensor
) -> float:
    """The share of corrected tokens whose weight the cap cut (0 for a masking window, which
    zeroes weights instead: see masked_fraction)."""
    lower, upper = ratio_bounds(section.rollout_is_threshold)
    if lower is not None:
        return 0.0
    if section.is_level == "sequence":
        # One weight per sequence, the product of its tokens' ratios: all its tokens are cut
        # together.
        over = (log_ratio.sum(dim=1, keepdim=True) > math.log(upper)).expand_as(mask)
    else:
        over = log_ratio > math.log(upper)
    return float((over.float() * mask).sum() / mask.sum())


def staleness_metrics(policy_versions: torch.Tensor, current_version: int) -> dict[str, float]:
    """Sequences by how many updates their sampling weights lag the trained ones (a histogram,
    one key per lag seen), with the mean and the largest lag."""
    lags = (current_version - policy_versions).clamp(min=0).tolist()
    if not lags:
        return {}
    counts = Counter(int(lag) for lag in lags)
    return {
        **{f"{PREFIX}staleness/lag_{lag}": float(count) for lag, count in sorted(counts.items())},
        f"{PREFIX}staleness_mean": sum(lags) / len(lags),
        f"{PREFIX}staleness_max": float(max(lags)),
    }


def apply(
    section: RolloutCorrectionConfig,
    batch: TensorBatch,
    trainer_logprobs: torch.Tensor | None,
    current_version: int,
) -> tuple[TensorBatch, dict[str, float]]:
    """`batch` with the correction's loss mask and weights, and the correction's metrics.

    `trainer_logprobs` may be None only when the batch holds no engine log-probs at all.
    """
    metrics = (
        staleness_metrics(batch.policy_versions, current_version)
        if batch.policy_versions is not None
        else {}
    )
    if not has_engine_logprobs(batch):
        metrics.update(coverage_metrics(torch.zeros_like(batch.loss_mask) > 0, batch.loss_mask))
        return batch, metrics
    if trainer_logprobs is None:
        raise ValueError("rollout correction needs the trainer's log-probs of the batch")
    assert batch.rollout_logprobs is not None and batch.rollout_logprob_mask is not None
    result = correct(
        section,
        trainer_logprobs,
        batch.rollout_logprobs,
        batch.rollout_logprob_mask,
        batch.loss_mask,
    )
    metrics.update(result.metrics)
    corrected = dataclasses.replace(
        batch, loss_mask=result.loss_mask, rollout_is_weights=result.rollout_is_weights
    )
    return corrected, metrics


def weighted(
    section: RolloutCorrectionConfig, part: TensorBatch, trainer_logprobs: torch.Tensor
) -> TensorBatch:
    """`part` (some whole sequences) with its importance weights, for a correction that keeps
    every token (no rejection) and decides each token's weight from its own sequence: the same
    weights as ``apply`` over the whole batch gives these rows."""
    if not has_engine_logprobs(part):
        return part
    assert part.rollout_logprobs is not None and part.rollout_logprob_mask is not None
    result = correct(
        section, trainer_logprobs, part.rollout_logprobs, part.rollout_logprob_mask, part.loss_mask
    )
    return dataclasses.replace(part, rollout_is_weights=result.rollout_is_weights)


def has_engine_logprobs(batch: TensorBatch) -> bool:
    """Whether any trained token of `batch` has an engine log-prob (else nothing to score)."""
    if batch.rollout_logprob_mask is None:
        return False
    return bool(((batch.rollout_logprob_mask > 0) & (batch.loss_mask > 0)).any())
