"""The native trainer's policy update: forward passes, old and reference log-probs, advantages,
the loss (verl's policy loss, KL penalty and value loss) and rollout correction.

:class:`PolicyUpdate` owns the trained model, its optimizer, PPO's value head and the KL
reference, and does one update per call on a :class:`~rllm_train.native.batch.TensorBatch`:

1. old log-probs and values, when the update needs them before it changes the weights
   (several epochs, PPO);
2. advantages, from verl's estimator (or given per trajectory: RAE), plus with a teacher
   (on-policy distillation, :mod:`.distill`) its per-token log-prob margin over the student;
3. rollout correction, planned once for the batch (:class:`CorrectionPlan`): off, scored in a
   pass of its own before the update, or scored inside the update's own forward pass;
4. the rows worth a forward pass (none with an advantage of 0 everywhere when
   ``drop_zero_advantage``; none whose every token the correction rejected);
5. ``ppo_epochs`` passes over micro-batches, gradients accumulated, one optimizer step each.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from rllm_train import algorithms
from rllm_train.config import RolloutCorrectionConfig, TrainConfig
from rllm_train.native import distill, rollout_correction
from rllm_train.native.batch import TensorBatch
from rllm_train.run.algorithm import algorithm as algorithm_entry

UPDATE_METRICS = ("loss", "pg_loss", "kl", "value_loss", "grad_norm")


def algorithm_settings(config: TrainConfig) -> algorithms.AlgorithmSettings:
    algo = config.algorithm
    return algorithms.AlgorithmSettings(
        name=algo.name,
        gamma=algo.gamma,
        lam=algo.lam,
        norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
        clip_ratio=algo.clip_ratio,
        policy_loss=algo.policy_loss,
        loss_agg_mode=algo.loss_agg_mode,
        kl_penalty=algo.kl_penalty,
        cliprange_value=algo.cliprange_value,
    )


def informative_rows(advantages: torch.Tensor, loss_mask: torch.Tensor) -> list[int]:
    """The rows with a non-zero advantage on some trained token."""
    return ((advantages != 0) & (loss_mask > 0)).any(dim=1).nonzero().squeeze(-1).tolist()


@dataclass
class _MetricSums:
    """Weighted sums of scalar tensors, read back from the device once, at the end."""

    terms: dict[str, list[torch.Tensor]] = field(
        default_factory=lambda: {name: [] for name in UPDATE_METRICS}
    )

    def add(self, name: str, value: torch.Tensor, weight: float) -> None:
        self.terms[name].append(value.detach().float() * weight)

    def read(self) -> dict[str, float]:
        present = [name for name in UPDATE_METRICS if self.terms[name]]
        totals = [torch.stack(self.terms[name]).sum() for name in present]
        read = torch.stack(totals).tolist() if totals else []  # one device-to-host copy
        found = dict(zip(present, read, strict=True))
        return {name: found.get(name, 0.0) for name in UPDATE_METRICS}


@dataclass(frozen=True)
class PredictedLogits:
    """A forward pass's logits at the positions that predict trained tokens."""

    logits: torch.Tensor  # (batch, positions, vocabulary), float32
    input_ids: torch.Tensor
    positions: torch.Tensor  # the predicting positions; token t sits at position + 1

    def logprobs(self, temperature: float = 1.0) -> torch.Tensor:
        """The log-prob of each predicted token under the softmax at `temperature`, at the
        token's own position of a (batch, length) tensor (0 elsewhere)."""
        logits = self.logits / temperature if temperature != 1.0 else self.logits
        targets = self.input_ids[:, self.positions + 1]
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
        logprobs = torch.zeros(self.input_ids.shape, dtype=picked.dtype, device=picked.device)
        logprobs[:, self.positions + 1] = picked
        return logprobs


@dataclass(frozen=True)
class CorrectionPlan:
    """How one update corrects for the engine that sampled its batch, decided once.

    Off when the engine sampled the trained weights themselves (or the section says so).
    With one epoch the weights do not change until the optimiser steps after the last
    micro-batch, so the training pass's log-probs are the trainer's log-probs the correction
    compares with the engine's: scoring them in a pass of their own would cost a whole forward
    pass more. That needs a correction decided token by token from one sequence's own tokens:
    no rejection (it changes which tokens the loss counts, before the pass), no normalisation
    of the weights over the batch; anything else is scored before the update.
    """

    on: bool = False
    in_pass_temperature: float | None = None  # scored inside the update's own pass at it

    @property
    def before_update(self) -> bool:
        return self.on and self.in_pass_temperature is None

    @classmethod
    def decide(
        cls,
        section: RolloutCorrectionConfig,
        corrects: bool,
        batch: TensorBatch,
        epochs: int,
        sampling_temperature: float,
    ) -> CorrectionPlan:
        if not corrects:
            return cls()
        per_token = section.rs_options is None and not section.rollout_is_batch_normalize
        if epochs == 1 and per_token and rollout_correction.has_engine_logprobs(batch):
            return cls(True, rollout_correction.scoring_temperature(sampling_temperature))
        return cls(True)


@dataclass
class _Trained:
    """What the passes over the batch train on (the rows kept, cropped to their width)."""

    batch: TensorBatch
    advantages: torch.Tensor
    returns: torch.Tensor
    old_logprobs: torch.Tensor | None
    values: torch.Tensor | None

    def rows(self, keep: list[int]) -> _Trained:
        batch = self.batch.rows(keep)
        width = batch.input_ids.shape[1]

        def crop(tensor: torch.Tensor | None) -> torch.Tensor | None:
            return tensor[keep, :width] if tensor is not None else None

        return _Trained(
            batch,
            self.advantages[keep, :width],
            self.returns[keep, :width],
            crop(self.old_logprobs),
            crop(self.values),
        )


class PolicyUpdate:
    """The trained model, its optimizer and what the loss needs (see the module docstring)."""

    def __init__(
        self,
        config: TrainConfig,
        model: Any,
        optimizer: torch.optim.Optimizer,
        *,
        device: torch.device,
        autocast_dtype: torch.dtype | None = None,
        value_head: torch.nn.Module | None = None,
        reference: Any = None,
    ) -> None:
        self.config = config
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self.autocast_dtype = autocast_dtype
        self.value_head = value_head
        self.reference = reference
        self.settings = algorithm_settings(config)

    # -- forward passes ------------------------------------------------------------------------
    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def logits(
        self, batch: TensorBatch, model=None, want_hidden: bool = False
    ) -> tuple[PredictedLogits, Any]:
        """The logits that predict `batch`'s trained tokens, and the last hidden states (or None).

        Only the positions that predict a trained token are projected onto the vocabulary
        (``logits_to_keep``): with long prompts and env turns that is most of the compute.
        """
        model = model or self.model
        input_ids = batch.input_ids.to(self.device)
        predicted = batch.loss_mask[:, 1:].any(dim=0).nonzero().squeeze(-1)  # token t = pos + 1
        with self._autocast():
            output = model(
                input_ids=input_ids,
                attention_mask=batch.attention_mask.to(self.device),
                output_hidden_states=want_hidden,
                use_cache=False,
                logits_to_keep=predicted.to(self.device),
            )
        hidden = output.hidden_states[-1] if want_hidden else None
        return PredictedLogits(output.logits.float(), input_ids, predicted.to(self.device)), hidden

    def forward(
        self, batch: TensorBatch, model=None, want_hidden: bool = False, temperature: float = 1.0
    ):
        """(log-probs (batch, length), last hidden states or None) for `batch`, of the softmax
        at `temperature`."""
        logits, hidden = self.logits(batch, model, want_hidden)
        return logits.logprobs(temperature), hidden

    def micro_batches(self, size: int) -> list[list[int]]:
        step = self.config.trainer.micro_batch_size
        return [list(range(start, min(start + step, size))) for start in range(0, size, step)]

    @torch.no_grad()
    def old_policy(self, batch: TensorBatch, need_logprobs: bool):
        """Values (PPO) and log-probs before the update, when the update needs them."""
        old_logprobs = torch.zeros(batch.input_ids.shape) if need_logprobs else None
        values = torch.zeros(batch.input_ids.shape) if self.value_head is not None else None
        if old_logprobs is None and values is None:
            return None, None  # one on-policy pass: the current log-probs are the old ones
        for rows in self.micro_batches(len(batch)):
            part = batch.rows(rows)
            logprobs, hidden = self.forward(part, want_hidden=values is not None)
            used = part.input_ids.shape[1]
            if old_logprobs is not None:
                old_logprobs[rows, :used] = logprobs.float().cpu()
            if values is not None:
                values[rows, :used] = self.value_head(hidden).float().cpu()
        return old_logprobs, values

    @torch.no_grad()
    def scored_logprobs(self, batch: TensorBatch, temperature: float, model=None) -> torch.Tensor:
        """The current weights' (or `model`'s: a teacher's) log-probs of `batch` at
        `temperature`, on the CPU."""
        scored = torch.zeros(batch.input_ids.shape)
        for rows in self.micro_batches(len(batch)):
            part = batch.rows(rows)
            scored[rows, : part.input_ids.shape[1]] = (
                self.forward(part, model=model, temperature=temperature)[0].float().cpu()
            )
        return scored

    @torch.no_grad()
    def reference_logprobs(self, part: TensorBatch) -> torch.Tensor:
        if self.reference is not None:
            return self.forward(part, model=self.reference)[0]
        with self.model.disable_adapter():  # LoRA: the base weights are the reference
            return self.forward(part)[0]

    # -- the update ------------------------------------------------------------------------------
    def advantages(self, batch: TensorBatch, values: torch.Tensor | None):
        """(advantages, returns), both (batch, length)."""
        if algorithm_entry(self.settings.name).teacher_only:
            # --algorithm distill: every advantage is the teacher's (__call__ adds it).
            nothing = torch.zeros_like(batch.loss_mask, dtype=torch.float32)
            return nothing, nothing
        if batch.advantages is not None:  # computed per trajectory (RAE)
            return algorithms.given_advantages(batch.advantages, batch.loss_mask)
        shared = algorithms.shared_trajectory_advantages(
            self.settings, batch.rewards, batch.loss_mask, batch.groups, batch.trajectories
        )
        if shared is not None:  # compacted episodes: one advantage per trajectory
            return shared
        return algorithms.compute_advantages(
            self.settings, batch.rewards, batch.loss_mask, batch.groups, values
        )

    def _distilling(self, batch: TensorBatch) -> bool:
        """Whether `batch` carries a teacher's log-probs (an algorithm that learns from the
        teacher alone refuses a batch without them rather than learn nothing)."""
        if batch.teacher_logprobs is not None:
            return True
        if algorithm_entry(self.settings.name).teacher_only:
            raise ValueError(
                f"--algorithm {self.settings.name} needs the teacher's log-probs on the batch "
                "(the distillation trainer, rllm_train.native.distill_trainer, scores them)"
            )
        return False

    def _correct_before(
        self, batch: TensorBatch, old_logprobs: torch.Tensor | None, version: int
    ) -> tuple[TensorBatch, dict[str, float]]:
        """`batch` with the correction's loss mask and weights, scored before the update."""
        scored = None
        if rollout_correction.has_engine_logprobs(batch):
            # The engine scored its tokens at the sampling temperature; the "old" log-probs of
            # a multi-epoch update are at 1, so they serve only when the two agree.
            temperature = rollout_correction.scoring_temperature(self.config.rollout.temperature)
            scored = old_logprobs if temperature == 1.0 and old_logprobs is not None else None
            if scored is None:
                scored = self.scored_logprobs(batch, temperature)
        section = self.config.algorithm.rollout_correction
        return rollout_correction.apply(section, batch, scored, version)

    def _rows_to_train(self, advantages: torch.Tensor, loss_mask: torch.Tensor) -> list[int] | None:
        """The rows the forward/backward needs (None: all of them)."""
        if self.config.algorithm.drop_zero_advantage:
            # A sequence with no advantage on any token adds nothing to the policy gradient:
            # leave it out (its group taught nothing this step).
            return informative_rows(advantages, loss_mask)
        # A row rollout correction rejected whole has no token left in any loss term.
        trained = (loss_mask > 0).any(dim=1)
        return None if bool(trained.all()) else trained.nonzero().squeeze(-1).tolist()

    def __call__(self, batch: TensorBatch, *, version: int, corrects: bool) -> dict[str, float]:
        """One policy update on `batch` (``ppo_epochs`` passes, gradients accumulated).

        `version` is the number of updates the weights have had; `corrects` whether the
        engine that sampled the batch was another than the trained model (rollout correction).
        """
        self.model.train()
        epochs = self.config.trainer.ppo_epochs
        distilling = self._distilling(batch)
        # A teacher's advantage needs the student's log-probs before the update.
        old_logprobs, values = self.old_policy(batch, need_logprobs=epochs > 1 or distilling)
        advantages, returns = self.advantages(batch, values)
        teacher_metrics: dict[str, float] = {}
        if distilling:
            advantages = distill.mixed_advantages(
                advantages,
                batch.teacher_logprobs,
                old_logprobs,
                batch.loss_mask,
                self.config.distill.weight,
            )
            teacher_metrics = distill.distill_metrics(
                batch.teacher_logprobs, old_logprobs, batch.loss_mask
            )
        total_tokens = float(batch.loss_mask.sum().clamp(min=1))
        advantage_abs_mean = float((advantages.abs() * batch.loss_mask).sum() / total_tokens)
        sampled = batch
        section = self.config.algorithm.rollout_correction
        plan = CorrectionPlan.decide(
            section, corrects, batch, epochs, self.config.rollout.temperature
        )
        correction_metrics: dict[str, float] = {}
        if plan.before_update:
            batch, correction_metrics = self._correct_before(batch, old_logprobs, version)
        trained = _Trained(batch, advantages, returns, old_logprobs, values)
        keep = self._rows_to_train(advantages, batch.loss_mask)
        if keep is not None:
            if not keep:  # nothing to learn from: no pass, no step
                return {
                    **dict.fromkeys(UPDATE_METRICS, 0.0),
                    "sequences_trained": 0,
                    "advantage_abs_mean": advantage_abs_mean,
                    **correction_metrics,
                    **teacher_metrics,
                }
            trained = trained.rows(keep)
        sums, scored, timings = self._passes(trained, epochs, plan)
        if scored is not None:
            _, correction_metrics = rollout_correction.apply(
                section, trained.batch, scored, version
            )
            if sampled.policy_versions is not None:  # every sampled sequence, trained or not
                correction_metrics.update(
                    rollout_correction.staleness_metrics(sampled.policy_versions, version)
                )
        return {
            **sums.read(),
            **timings,
            "advantage_abs_mean": advantage_abs_mean,
            "sequences_trained": len(trained.batch),
            **correction_metrics,
            **teacher_metrics,
        }

    def _passes(
        self, trained: _Trained, epochs: int, plan: CorrectionPlan
    ) -> tuple[_MetricSums, torch.Tensor | None, dict[str, float]]:
        """The epochs of forward/backward passes and optimizer steps; the log-probs scored in
        the passes for the correction (None: not scored there), and the time they took."""
        batch = trained.batch
        total_tokens = float(batch.loss_mask.sum().clamp(min=1))
        # Metrics stay on the device until the update is done: reading one back per
        # micro-batch (.item()) would make a GPU drain its queue before every next forward.
        sums = _MetricSums()
        scored = (
            torch.zeros(batch.input_ids.shape) if plan.in_pass_temperature is not None else None
        )
        forward_backward = optimizer_seconds = 0.0
        for _epoch in range(epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for rows in self.micro_batches(len(batch)):
                started = time.perf_counter()
                weight = float(batch.loss_mask[rows].sum()) / total_tokens
                loss = self._micro_batch_loss(trained, rows, plan, scored, sums, weight / epochs)
                (loss * weight).backward()
                sums.add("loss", loss, weight / epochs)
                forward_backward += time.perf_counter() - started
            started = time.perf_counter()
            parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
            grad_norm = torch.nn.utils.clip_grad_norm_(
                parameters, self.config.trainer.max_grad_norm
            )
            sums.add("grad_norm", grad_norm, 1.0 / epochs)
            self.optimizer.step()
            optimizer_seconds += time.perf_counter() - started
        self.optimizer.zero_grad(set_to_none=True)
        timings = {
            "time/forward_backward_s": forward_backward,
            "time/optimizer_s": optimizer_seconds,
        }
        return sums, scored, timings

    def _micro_batch_loss(
        self,
        trained: _Trained,
        rows: list[int],
        plan: CorrectionPlan,
        scored: torch.Tensor | None,
        sums: _MetricSums,
        share: float,
    ) -> torch.Tensor:
        """The loss of one micro-batch: policy loss, plus the KL and value terms when on."""
        part = trained.batch.rows(rows)
        used = part.input_ids.shape[1]
        mask = part.loss_mask.to(self.device)
        logits, hidden = self.logits(part, want_hidden=trained.values is not None)
        logprobs = logits.logprobs()
        if scored is not None:
            # The trainer's side of the correction from this very pass (CorrectionPlan).
            scored[rows, :used] = logits.logprobs(plan.in_pass_temperature).detach().float().cpu()
            part = rollout_correction.weighted(
                self.config.algorithm.rollout_correction, part, scored[rows, :used]
            )
        # One on-policy epoch: the policy that sampled is the one being updated, so the old
        # log-probs are the current ones (no second forward pass); PPO's ratio is 1 and its
        # gradient is the policy gradient's.
        old = (
            trained.old_logprobs[rows, :used].to(self.device)
            if trained.old_logprobs is not None
            else logprobs.detach()
        )
        pg_loss, _ = algorithms.policy_loss(
            self.settings,
            old,
            logprobs,
            trained.advantages[rows, :used].to(self.device),
            mask,
            rollout_is_weights=(
                part.rollout_is_weights.to(self.device)
                if part.rollout_is_weights is not None
                else None
            ),
        )
        loss = pg_loss
        sums.add("pg_loss", pg_loss, share)
        algorithm = self.config.algorithm
        if algorithm.kl_coef > 0:
            kl = algorithms.kl_to_reference(
                self.settings, logprobs, self.reference_logprobs(part), mask
            )
            loss = loss + algorithm.kl_coef * kl
            sums.add("kl", kl, share)
        if trained.values is not None:
            critic = algorithms.value_loss(
                self.settings,
                self.value_head(hidden),
                trained.returns[rows, :used].to(self.device),
                trained.values[rows, :used].to(self.device),
                mask,
            )
            loss = loss + algorithm.value_coef * critic
            sums.add("value_loss", critic, share)
        return loss
