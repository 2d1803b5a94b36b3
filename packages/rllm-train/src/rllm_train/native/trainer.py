"""The native training loop: rollouts -> advantages -> clipped policy update, step after step.

Each step draws ``tasks_per_step`` tasks (a pure function of the run seed, the step number and
the curriculum's success estimates, which checkpoints keep, so a resumed run sees exactly the
data the uninterrupted one would: :mod:`.curriculum`), plays ``n``
episodes per task with the current weights through its sampler (:mod:`.sampler`: the execution
engine over a local engine serving the very model being trained, so rollouts always use the
latest update, each request seeded from the run seed, the step, the episode and the turn),
turns them into training sequences, computes advantages with verl's estimator and updates with
verl's policy loss, accumulating gradients over micro-batches.

A multi-agent env (``env.id`` a PettingZoo-style module such as ``kuhn_poker_v0``) is played by
:class:`~rllm_train.native.multiagent_sampler.MultiAgentSampler` on the same seam, with the
seats given by the ``multiagent`` section; only the trained model's seats are trained on, and
``algorithm.name=rae`` baselines each role with its own running mean
(:mod:`~rllm_train.native.role_advantages`).

With ``rollout.tree.enabled`` a step's episodes come from
:class:`~rllm_train.native.tree.TreeSampler` instead: continuations branched from a snapshot of
each task's episode, grouped by snapshot (``Rollout.groups``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from rllm_agents.agents.base import BaseAgent
from rllm_agents.metrics import compute_pass_at_k
from rllm_agents.run_folder import RunLock, check_output, fault_point, write_atomic
from rllm_agents.types import Episode

from rllm_train import algorithms
from rllm_train.config import ConfigError, TrainConfig, save_config
from rllm_train.datasets import RunData, run_data, validation_rows
from rllm_train.envs import make_env_factory
from rllm_train.native import checkpoint, reporting, rollout_correction
from rllm_train.native.agent import agent_class_for, default_agent_args
from rllm_train.native.async_rollouts import PENDING_KEY, PlayAhead, PlayedStep, is_stale
from rllm_train.native.batch import (
    TensorBatch,
    episodes_to_sequences,
    model_tokens,
    to_tensors,
    trained_trajectories,
)
from rllm_train.native.curriculum import (
    CURRICULUM_KEY,
    PlannedStep,
    curriculum_for_run,
    step_task_seeds,
)
from rllm_train.native.engine_apart import (
    EngineApart,
    check_engine_apart,
    snapshot_weights,
    start_engine_apart,
)
from rllm_train.native.judging import EpisodeJudging, check_judge_run, judge_metrics
from rllm_train.native.models import ValueHead, frozen_copy, hidden_size, load_policy, pick_device
from rllm_train.native.multiagent_sampler import (
    TRAINED_SUCCESS,
    MultiAgentSampler,
    seat_metrics,
    trained_rewards,
)
from rllm_train.native.multiagent_setup import multiagent_setup
from rllm_train.native.opponents import load_frozen_models
from rllm_train.native.optim import build_optimizer
from rllm_train.native.program_sampler import ProgramSampler, check_program_run
from rllm_train.native.role_advantages import RoleBaselines, role_key
from rllm_train.native.sampler import (
    EpisodeSampler,
    ExecutionSampler,
    Rollout,
    RolloutLimits,
    rollout_executor,
)
from rllm_train.native.tree import TreeSampler, check_tree_env

VALIDATION_STREAM = 1_000_003  # seeds validation tasks apart from training ones
SAMPLING_STREAM = 7  # seeds the model's draws apart from the task draws
ROLE_BASELINES = "role_baselines"  # where a checkpoint keeps RAE's baselines


def validation_seeds(run_seed: int, count: int) -> list[int]:
    return step_task_seeds(run_seed, VALIDATION_STREAM, count)


def step_sampling_seed(run_seed: int, step: int) -> int:
    """The sampling seed of step `step`: each model request's seed derives from it."""
    state = np.random.SeedSequence([run_seed, step, SAMPLING_STREAM]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


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


def rows_given(rows: list[dict[str, Any]] | None) -> dict[str, Any]:
    """``tasks=rows`` for a sampler call with rows; samplers that only take seeds (the
    multi-agent one, plug-ins) never see the keyword."""
    return {"tasks": rows} if rows is not None else {}


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


UPDATE_METRICS = ("loss", "pg_loss", "kl", "value_loss", "grad_norm")


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
    """A forward pass's logits at the positions that predict trained tokens (module: _logits)."""

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


class NativeTrainer:
    """Trains `config.model` on `config.env` on a CPU or one CUDA GPU (see the module doc)."""

    def __init__(
        self,
        config: TrainConfig,
        *,
        agent_class: type[BaseAgent] | None = None,
        agent_args: dict[str, Any] | None = None,
        env_factory: Callable[[], gym.Env] | None = None,
        run_lock: RunLock | None = None,
    ) -> None:
        self.config = config
        # The CLI locks the folder before anything slow and hands its lock over; without one,
        # train() takes it for the run's life.
        self.run_lock = run_lock
        self.output = Path(config.trainer.output)
        # Cheap checks first: a bad env id or output dir fails before any model loads.
        self.multiagent = multiagent_setup(config)
        if env_factory is None:
            env_factory = (
                self.multiagent.env_factory
                if self.multiagent is not None
                else make_env_factory(config.env.id, config.env.kwargs, config.env.entry_point)
            )
        self.env_factory = env_factory
        # The rows trained and validated on (data.train / data.val, or the env's shipped
        # train/test pair); multi-agent games are drawn from seeds.
        self.data = run_data(config) if self.multiagent is None else RunData()
        self.program = check_program_run(config, self.multiagent, self.data)
        # Which tasks each step plays (uniform, or weighted by measured success).
        self.curriculum = curriculum_for_run(
            config,
            self.data,
            multiagent=self.multiagent is not None,
            validation_seeds=validation_seeds(config.trainer.seed, config.trainer.val_tasks),
        )
        check_engine_apart(config)
        if self.plays_apart and self.multiagent is not None:
            raise ConfigError(
                "rollout.mode / rollout.engine: multi-agent games are played by the trained "
                "model itself (and its frozen copies); leave rollout.mode=sync, "
                "rollout.engine=local"
            )
        check_judge_run(config, self.multiagent)
        self.agent_factory = self._agent_factory(agent_class, agent_args or {})
        check_tree_env(config, None if self.multiagent is not None else env_factory)
        latest = self.output / "checkpoints" / checkpoint.LATEST
        if latest.exists() and not config.trainer.resume:
            raise ConfigError(
                f"trainer.output: {self.output} already holds a run; pass --resume to continue "
                "it or choose another --output"
            )
        self.settings = algorithm_settings(config)
        rollout_correction.check_with_verl(config.algorithm.rollout_correction)
        self.device = pick_device(config.trainer.device)
        if self.device.type == "cpu" and config.trainer.cpu_threads:
            torch.set_num_threads(config.trainer.cpu_threads)
        _seed_everything(config.trainer.seed)
        self.model, self.tokenizer, compute_dtype = load_policy(config.model, self.device)
        if config.model.init_from:
            # Before the reference and the frozen players are copied: they start from it too.
            try:
                checkpoint.load_weights(self.model, config.model.init_from)
            except (FileNotFoundError, ValueError) as error:
                raise ConfigError(f"model.init_from: {error}") from error
        # bf16 (or fp16) runs as autocast on a GPU; the weights and optimizer stay float32.
        self.autocast_dtype = (
            compute_dtype if self.device.type == "cuda" and compute_dtype != torch.float32 else None
        )
        self.pad_id = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id
        )
        self.value_head = (
            ValueHead(hidden_size(self.model)).to(self.device)
            if config.algorithm.name == "ppo"
            else None
        )
        self.reference = None
        if config.algorithm.kl_coef > 0 and config.model.lora_rank == 0:
            self.reference = frozen_copy(self.model)
        # Frozen players are copied now, before any update (or resume) changes the weights.
        self.frozen_players = (
            load_frozen_models(
                self.multiagent.frozen_models, self.model, self.tokenizer, self.device
            )
            if self.multiagent is not None
            else {}
        )
        self.role_baselines = (
            RoleBaselines(config.algorithm.rae_decay) if config.algorithm.name == "rae" else None
        )
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        if self.value_head is not None:
            parameters += list(self.value_head.parameters())
        self.optimizer = build_optimizer(
            parameters, lr=config.trainer.lr, weight_decay=config.trainer.weight_decay
        )
        self.completed_steps = 0
        self.last_episodes: list[Episode] = []
        self._sampler: EpisodeSampler | None = None
        self._tree_sampler: TreeSampler | None = None  # rollout.tree: the training episodes
        # rollout.mode=async or rollout.engine=llamacpp: the steps' episodes come from an
        # engine apart, played ahead (async_rollouts.py); self.sampler then only validates.
        self.play_ahead: PlayAhead | None = None
        self._apart_sampler: ExecutionSampler | None = None
        self._restored_played: list[PlayedStep] = []
        self._judging: EpisodeJudging | None = None

    # -- set-up ----------------------------------------------------------------------------
    def _agent_factory(
        self, agent_class: type[BaseAgent] | None, agent_args: dict[str, Any]
    ) -> Callable[[], BaseAgent]:
        chosen = agent_class or agent_class_for(self.config.env.id, self.config.env.agent)
        defaults = {} if self.config.env.entry_point else default_agent_args(self.config.env.id)
        arguments = {**defaults, **agent_args}
        if self.config.env.system_prompt:
            arguments.setdefault("system_prompt", self.config.env.system_prompt)
        return lambda: chosen(**arguments)

    @property
    def sampler(self) -> EpisodeSampler:
        """Where episodes come from (made on first use; assign another to plug one in)."""
        if self._sampler is None:
            rollout = self.config.rollout
            limits = self._rollout_limits()
            max_batch_size = self._max_batch_size()
            if self.program is not None:
                self._sampler = ProgramSampler(
                    self.model,
                    self.tokenizer,
                    self.program,
                    self.env_factory,
                    limits,
                    max_batch_size=max_batch_size,
                    timeout=self.config.program.timeout or None,
                    retries=self.config.program.retries,
                    autocast_dtype=self.autocast_dtype,
                )
                return self._sampler
            if self.multiagent is not None:
                self._sampler = MultiAgentSampler(
                    self.model,
                    self.tokenizer,
                    self.multiagent,
                    self.agent_factory,
                    limits,
                    frozen=self.frozen_players,
                    max_batch_size=max_batch_size,
                    autocast_dtype=self.autocast_dtype,
                    env_factory=self.env_factory,
                )
                return self._sampler
            self._sampler = ExecutionSampler(
                self.model,
                self.tokenizer,
                self.env_factory,
                self.agent_factory,
                limits,
                max_batch_size=max_batch_size,
                autocast_dtype=self.autocast_dtype,
                executor=rollout_executor(rollout, self.config.env),
            )
        return self._sampler

    @sampler.setter
    def sampler(self, sampler: EpisodeSampler) -> None:
        self._sampler = sampler  # the one it replaces is the caller's to close

    @property
    def training_sampler(self) -> EpisodeSampler:
        """Where a step's training episodes come from: :attr:`sampler`, or with rollout.tree
        the tree sampler (branch groups; validation still plays whole episodes)."""
        tree = self.config.rollout.tree
        if not tree.enabled:
            return self.sampler
        if self._tree_sampler is None:
            self._tree_sampler = TreeSampler(
                self.model,
                self.tokenizer,
                self.env_factory,
                self.agent_factory,
                self._rollout_limits(),
                branches=self.config.rollout.n,
                branch_turns=tree.branch_turns,
                max_batch_size=self._max_batch_size(),
                autocast_dtype=self.autocast_dtype,
            )
        return self._tree_sampler

    @property
    def judging(self) -> EpisodeJudging | None:
        """The judge that scores the episodes (reward.judge; None: the env's rewards), made on
        first use. A run makes it on its main thread before any episode is played: llama.cpp
        servers end with the thread that started them."""
        if self._judging is None and self.config.reward.judge.on:
            self._judging = EpisodeJudging(self.config.reward.judge, self.output, str(self.device))
        return self._judging

    def _judged(self, rollout: Rollout, groups: list[str], log_name: str) -> Rollout:
        """`rollout` with the judge's rewards when the run has a judge (`groups`: the group of
        each episode, which a group judge ranks together)."""
        if self.judging is None:
            return rollout
        return self.judging.score(rollout, groups, log_name)

    def _rollout_limits(self) -> RolloutLimits:
        rollout = self.config.rollout
        return RolloutLimits(
            max_turns=rollout.max_turns,
            max_response_tokens=rollout.max_response_tokens,
            max_prompt_tokens=rollout.max_prompt_tokens,
            top_p=rollout.top_p,
            dispatch=rollout.dispatch,
        )

    def _max_batch_size(self) -> int:
        """A step's (or validation's) episodes all fit in one batch."""
        rollout = self.config.rollout
        return max(rollout.tasks_per_step * rollout.n, self.config.trainer.val_tasks)

    @property
    def plays_apart(self) -> bool:
        """Whether training episodes come from an engine apart from the trained model."""
        return self.config.rollout.mode == "async" or self.config.rollout.engine != "local"

    def _start_play_ahead(self) -> PlayAhead:
        rollout = self.config.rollout
        apart: EngineApart = start_engine_apart(
            self.config,
            self.model,
            self.tokenizer,
            version=self.completed_steps,
            max_batch_size=self._max_batch_size(),
            autocast_dtype=self.autocast_dtype,
        )
        self._apart_sampler = ExecutionSampler(
            self.model,
            self.tokenizer,
            self.env_factory,
            self.agent_factory,
            self._rollout_limits(),
            max_batch_size=self._max_batch_size(),
            engine=apart.engine,
        )
        sampler = self._apart_sampler
        return PlayAhead(
            apart,
            lambda step: self._play_step(sampler, step),
            first_step=self.completed_steps,
            last_step=self.config.trainer.steps,
            max_staleness=rollout.max_staleness if rollout.mode == "async" else 0,
            partial_rollouts=rollout.partial_rollouts,
            restored=self._restored_played,
        )

    def close(self) -> None:
        """Stop the samplers' engines (a later step makes a new one)."""
        if self.play_ahead is not None:
            self.play_ahead.close()
            self.play_ahead = None
        if self._apart_sampler is not None:
            self._apart_sampler.close()
            self._apart_sampler = None
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        if self._tree_sampler is not None:
            self._tree_sampler.close()
            self._tree_sampler = None
        if self._judging is not None:
            self._judging.close()
            self._judging = None

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    # -- the update ------------------------------------------------------------------------
    def _forward(
        self, batch: TensorBatch, model=None, want_hidden: bool = False, temperature: float = 1.0
    ):
        """(log-probs (batch, length), last hidden states or None) for `batch`, of the softmax
        at `temperature`."""
        logits, hidden = self._logits(batch, model, want_hidden)
        return logits.logprobs(temperature), hidden

    def _logits(
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

    def _micro_batches(self, size: int) -> list[list[int]]:
        step = self.config.trainer.micro_batch_size
        return [list(range(start, min(start + step, size))) for start in range(0, size, step)]

    @torch.no_grad()
    def _old_policy(self, batch: TensorBatch, need_logprobs: bool):
        """Values (PPO) and log-probs before the update, when the update needs them."""
        old_logprobs = torch.zeros(batch.input_ids.shape) if need_logprobs else None
        values = torch.zeros(batch.input_ids.shape) if self.value_head is not None else None
        if old_logprobs is None and values is None:
            return None, None  # one on-policy pass: the current log-probs are the old ones
        for rows in self._micro_batches(len(batch)):
            part = batch.rows(rows)
            logprobs, hidden = self._forward(part, want_hidden=values is not None)
            used = part.input_ids.shape[1]
            if old_logprobs is not None:
                old_logprobs[rows, :used] = logprobs.float().cpu()
            if values is not None:
                values[rows, :used] = self.value_head(hidden).float().cpu()
        return old_logprobs, values

    def update(self, batch: TensorBatch) -> dict[str, float]:
        """One policy update on `batch` (ppo_epochs passes, gradients accumulated)."""
        self.model.train()
        epochs = self.config.trainer.ppo_epochs
        old_logprobs, values = self._old_policy(batch, need_logprobs=epochs > 1)
        if batch.advantages is not None:  # computed per trajectory (RAE)
            advantages, returns = algorithms.given_advantages(batch.advantages, batch.loss_mask)
        else:
            advantages, returns = algorithms.compute_advantages(
                self.settings, batch.rewards, batch.loss_mask, batch.groups, values
            )
        total_tokens = float(batch.loss_mask.sum().clamp(min=1))
        advantage_abs_mean = float((advantages.abs() * batch.loss_mask).sum() / total_tokens)
        sampled = batch
        scoring = self._scores_in_update(batch, epochs)
        if scoring is None:
            batch, correction_metrics = self._rollout_correction(batch, old_logprobs)
        total_tokens = float(batch.loss_mask.sum().clamp(min=1))
        keep = self._rows_to_train(advantages, batch.loss_mask)
        if keep is not None:
            if not keep:
                return {
                    **dict.fromkeys(UPDATE_METRICS, 0.0),
                    "sequences_trained": 0,
                    "advantage_abs_mean": advantage_abs_mean,
                    **correction_metrics,
                }
            batch = batch.rows(keep)
            width = batch.input_ids.shape[1]
            advantages, returns = advantages[keep, :width], returns[keep, :width]
            if old_logprobs is not None:
                old_logprobs = old_logprobs[keep, :width]
            total_tokens = float(batch.loss_mask.sum().clamp(min=1))
        # Metrics stay on the device until the update is done: reading one back per
        # micro-batch (.item()) would make a GPU drain its queue before every next forward.
        sums = _MetricSums()
        scored = torch.zeros(batch.input_ids.shape) if scoring is not None else None
        forward_backward = optimizer_seconds = 0.0
        for _epoch in range(epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for rows in self._micro_batches(len(batch)):
                started = time.perf_counter()
                part = batch.rows(rows)
                used = part.input_ids.shape[1]
                mask = part.loss_mask.to(self.device)
                weight = float(part.loss_mask.sum()) / total_tokens
                logits, hidden = self._logits(part, want_hidden=values is not None)
                logprobs = logits.logprobs()
                if scoring is not None:
                    # The trainer's side of the correction from this very pass (see
                    # _scores_in_update): no forward pass of its own.
                    scored[rows, :used] = logits.logprobs(scoring).detach().float().cpu()
                    part = rollout_correction.weighted(
                        self.config.algorithm.rollout_correction, part, scored[rows, :used]
                    )
                # One on-policy epoch: the policy that sampled is the one being updated, so
                # the old log-probs are the current ones (no second forward pass); PPO's ratio
                # is 1 and its gradient is the policy gradient's.
                old = (
                    old_logprobs[rows, :used].to(self.device)
                    if old_logprobs is not None
                    else logprobs.detach()
                )
                part_advantages = advantages[rows, :used].to(self.device)
                pg_loss, _ = algorithms.policy_loss(
                    self.settings,
                    old,
                    logprobs,
                    part_advantages,
                    mask,
                    rollout_is_weights=(
                        part.rollout_is_weights.to(self.device)
                        if part.rollout_is_weights is not None
                        else None
                    ),
                )
                loss = pg_loss
                sums.add("pg_loss", pg_loss, weight / epochs)
                if self.config.algorithm.kl_coef > 0:
                    kl = algorithms.kl_to_reference(
                        self.settings, logprobs, self._reference_logprobs(part), mask
                    )
                    loss = loss + self.config.algorithm.kl_coef * kl
                    sums.add("kl", kl, weight / epochs)
                if values is not None:
                    predicted = self.value_head(hidden)
                    critic = algorithms.value_loss(
                        self.settings,
                        predicted,
                        returns[rows, :used].to(self.device),
                        values[rows, :used].to(self.device),
                        mask,
                    )
                    loss = loss + self.config.algorithm.value_coef * critic
                    sums.add("value_loss", critic, weight / epochs)
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
        if scored is not None:
            _, correction_metrics = rollout_correction.apply(
                self.config.algorithm.rollout_correction, batch, scored, self.completed_steps
            )
            if sampled.policy_versions is not None:  # every sampled sequence, trained or not
                correction_metrics.update(
                    rollout_correction.staleness_metrics(
                        sampled.policy_versions, self.completed_steps
                    )
                )
        metrics = sums.read()
        metrics["time/forward_backward_s"] = forward_backward
        metrics["time/optimizer_s"] = optimizer_seconds
        metrics["advantage_abs_mean"] = advantage_abs_mean
        metrics["sequences_trained"] = len(batch)
        metrics.update(correction_metrics)
        return metrics

    def _rows_to_train(self, advantages: torch.Tensor, loss_mask: torch.Tensor) -> list[int] | None:
        """The rows the forward/backward needs (None: all of them)."""
        if self.config.algorithm.drop_zero_advantage:
            # A sequence with no advantage on any token adds nothing to the policy gradient:
            # leave it out (its group taught nothing this step).
            return informative_rows(advantages, loss_mask)
        # A row rollout correction rejected whole has no token left in any loss term.
        trained = (loss_mask > 0).any(dim=1)
        return None if bool(trained.all()) else trained.nonzero().squeeze(-1).tolist()

    def _corrects(self) -> bool:
        section = self.config.algorithm.rollout_correction
        # whichever played the steps
        generating = self._apart_sampler or self._tree_sampler or self._sampler
        shares = rollout_correction.samples_trained_weights(generating, self.model)
        return rollout_correction.correction_enabled(section, shares)

    def _scores_in_update(self, batch: TensorBatch, epochs: int) -> float | None:
        """The temperature at which the update's own forward pass scores the engine's tokens
        for rollout correction, or None when the correction needs a pass before the update.

        With one epoch the weights do not change until the optimiser steps after the last
        micro-batch, so the training pass's log-probs are the trainer's log-probs the
        correction compares with the engine's: scoring them in a pass of their own would cost
        a whole forward pass of the batch more. That needs a correction decided token by token
        from one sequence's own tokens: no rejection (it changes which tokens the loss counts,
        before the pass), no normalisation of the weights over the batch.
        """
        section = self.config.algorithm.rollout_correction
        if epochs != 1 or section.rs_options is not None or section.rollout_is_batch_normalize:
            return None
        if not self._corrects() or not rollout_correction.has_engine_logprobs(batch):
            return None
        return rollout_correction.scoring_temperature(self.config.rollout.temperature)

    def _rollout_correction(
        self, batch: TensorBatch, old_logprobs: torch.Tensor | None
    ) -> tuple[TensorBatch, dict[str, float]]:
        """`batch` with the rollout correction's loss mask and importance weights, and its
        metrics; `batch` as it is when the correction is off (rollout_correction.py)."""
        section = self.config.algorithm.rollout_correction
        if not self._corrects():
            return batch, {}
        scored = None
        if rollout_correction.has_engine_logprobs(batch):
            # The engine scored its tokens at the sampling temperature; the "old" log-probs of
            # a multi-epoch update are at 1, so they serve only when the two agree.
            temperature = rollout_correction.scoring_temperature(self.config.rollout.temperature)
            scored = old_logprobs if temperature == 1.0 else None
            if scored is None:
                scored = self._scored_logprobs(batch, temperature)
        return rollout_correction.apply(section, batch, scored, self.completed_steps)

    @torch.no_grad()
    def _scored_logprobs(self, batch: TensorBatch, temperature: float) -> torch.Tensor:
        """The current weights' log-probs of `batch` at `temperature`, on the CPU."""
        scored = torch.zeros(batch.input_ids.shape)
        for rows in self._micro_batches(len(batch)):
            part = batch.rows(rows)
            scored[rows, : part.input_ids.shape[1]] = (
                self._forward(part, temperature=temperature)[0].float().cpu()
            )
        return scored

    @torch.no_grad()
    def _reference_logprobs(self, part: TensorBatch) -> torch.Tensor:
        if self.reference is not None:
            return self._forward(part, model=self.reference)[0]
        with self.model.disable_adapter():  # LoRA: the base weights are the reference
            return self._forward(part)[0]

    # -- one step, validation, the loop ----------------------------------------------------
    def _step_tasks(self, step: int) -> PlannedStep:
        """Step `step`'s episodes, one entry each (each task `rollout.n` times): env seed,
        row when the run trains on data rows, task key (the curriculum's plan)."""
        return self.curriculum.plan(step).repeated(self.config.rollout.n)

    def _play_step(self, sampler: EpisodeSampler, step: int) -> Rollout:
        tasks = self._step_tasks(step)
        sampling_seed = step_sampling_seed(self.config.trainer.seed, step)
        rollout = sampler.sample(
            tasks.seeds, self.config.rollout.temperature, sampling_seed, **rows_given(tasks.rows)
        )
        groups = rollout.groups or [str(seed) for seed in tasks.seeds]
        return self._judged(rollout, groups, f"step_{step + 1:04d}")

    def _episodes_of(self, step: int) -> tuple[Rollout, PlannedStep, int, dict[str, Any]]:
        """Step `step`'s episodes, the task of each, the weights version that played them,
        and metrics of where they came from."""
        tasks = self._step_tasks(step)
        if self.play_ahead is None:
            return self._play_step(self.training_sampler, step), tasks, step, {}
        played, waited = self.play_ahead.take(step)
        # Episodes older than max_staleness allows: only from a checkpoint written under a
        # larger max_staleness (the player never starts a step on older weights).
        fresh = [
            not is_stale(episode, step, self.play_ahead.max_staleness)
            for episode in played.rollout.episodes
        ]
        rollout = dataclasses.replace(
            played.rollout,
            episodes=[e for e, keep in zip(played.rollout.episodes, fresh, strict=True) if keep],
        )
        origin = {
            "async/wait_s": waited,
            "async/version": played.version,
            "async/dropped_stale": fresh.count(False),
        }
        return rollout, tasks.kept(fresh), played.version, origin

    def _publish_weights(self) -> None:
        """Hand the weights after this update to the engine apart, if a later step needs them."""
        if self.play_ahead is not None and self.play_ahead.wants(self.completed_steps + 1):
            self.play_ahead.publish(snapshot_weights(self.model, self.completed_steps + 1))

    def train_step(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        sampled, tasks, played_by, origin = self._episodes_of(step)
        episodes = sampled.episodes
        self.last_episodes = episodes  # for inspection (benchmarks, debugging)
        if self.config.trainer.save_episodes:
            self.save_episodes(step, episodes, played_by)
        rollout_seconds = time.perf_counter() - started
        groups = sampled.groups or [str(seed) for seed in tasks.seeds]
        curriculum_metrics = {}
        if self.multiagent is None:
            # Before this step's weights are published: the steps played ahead plan with it.
            self.curriculum.record(step, episodes, tasks.keys)
            curriculum_metrics = self.curriculum.metrics(tasks, episodes, groups)
        sequences = episodes_to_sequences(
            episodes,
            groups,
            self.config.algorithm.sequence_mode,
            self._role_advantages(episodes, groups),
        )
        update_started = time.perf_counter()
        batch = to_tensors(sequences, self.pad_id, policy_version=played_by) if sequences else None
        losses = self.update(batch) if batch is not None else {}
        self._publish_weights()
        update_seconds = time.perf_counter() - update_started
        rewards = self._rewards(episodes)
        correct = [float(e.is_correct) for e in episodes if e.is_correct is not None]
        generated = [model_tokens(e) for e in episodes if e.trajectories]
        split = [
            t for e in episodes for t in e.trajectories if t.info.get("prefix_consistent") is False
        ]
        return {
            "step": step + 1,
            "reward_mean": float(np.mean(rewards)) if rewards else 0.0,
            "reward_std": float(np.std(rewards)) if rewards else 0.0,
            "accuracy": float(np.mean(correct)) if correct else None,
            "episodes": len(episodes),
            "failures": sum(e.failure is not None for e in episodes),
            # Ended in ERROR or TIMEOUT (a crashed program, the model server): not trained on.
            "errors": sum(e.error is not None for e in episodes),
            "sequences": len(sequences),
            "response_tokens_mean": float(np.mean(generated)) if generated else 0.0,
            "prefix_breaks": len(split),  # trajectories trained turn by turn (batch.py)
            "task_ids": sorted({str(e.info.get("task_key")) for e in episodes}),
            **losses,
            "time/rollout_s": rollout_seconds,
            "time/generate_s": sampled.generate_seconds,
            "time/env_s": sampled.env_seconds,
            **judge_metrics(sampled),
            "time/update_s": update_seconds,
            "time/step_s": time.perf_counter() - started,
            **origin,
            **curriculum_metrics,
            **(seat_metrics(episodes) if self.multiagent is not None else {}),
            **self._baseline_metrics(),
        }

    def save_episodes(
        self, step: int, episodes: list[Episode], played_by: int | None = None
    ) -> None:
        """Write a step's sampled episodes, stamped with the weights that played them (the
        model after `played_by` updates: `step` unless played ahead). Atomic, so a step
        replayed after a resume replaces its file instead of adding to it."""
        from rllm_agents.episodes.records import TRAIN_EPISODES_FOLDER, episodes_text

        version = step if played_by is None else played_by
        for episode in episodes:
            episode.policy.update(name=self.config.model.name, version=f"step-{version}")
        folder = self.output / TRAIN_EPISODES_FOLDER
        folder.mkdir(exist_ok=True)
        write_atomic(folder / f"step_{step + 1:04d}.jsonl", episodes_text(episodes))

    def _rewards(self, episodes: list[Episode]) -> list[float]:
        """What a step reports as its reward: the trained seats' in a multi-agent run."""
        if self.multiagent is not None:
            return trained_rewards(episodes)
        return [episode.reward for episode in episodes if episode.failure is None]

    def _role_advantages(self, episodes: list[Episode], groups: list[str]) -> list[float] | None:
        """RAE's advantage for each trained trajectory (None for verl's estimators)."""
        if self.role_baselines is None:
            return None
        pairs = trained_trajectories(episodes, groups)
        env_id = self.config.env.id
        return self.role_baselines.advantages(
            [trajectory.reward for trajectory, _ in pairs],
            [role_key(env_id, trajectory) for trajectory, _ in pairs],
        )

    def _baseline_metrics(self) -> dict[str, float]:
        if self.role_baselines is None:
            return {}
        return {f"rae_baseline/{key}": value for key, value in self.role_baselines.values.items()}

    def validate(self) -> dict[str, float]:
        """Greedy (val_temperature) rewards on the validation tasks - the held-out rows when
        the run has them, else seeds of their own - and, with rollout.val_n > 1, pass@k."""
        started = time.perf_counter()
        run_seed = self.config.trainer.seed
        rollout = self.config.rollout
        rows = (
            validation_rows(self.data.val, self.config.trainer.val_tasks)
            if self.data.val is not None
            else None
        )
        count = len(rows) if rows is not None else self.config.trainer.val_tasks
        seeds = validation_seeds(run_seed, count)
        sampling_seed = step_sampling_seed(run_seed, VALIDATION_STREAM + self.completed_steps)
        played = self.sampler.sample(
            seeds, rollout.val_temperature, sampling_seed, **rows_given(rows)
        )
        played = self._judged(
            played, [str(seed) for seed in seeds], f"val_{self.completed_steps:04d}"
        )
        episodes = played.episodes
        rewards = self._rewards(episodes)
        metrics = {
            "val/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
            **judge_metrics(played, "val/"),
            **(seat_metrics(episodes, "val/") if self.multiagent is not None else {}),
        }
        correct = [float(e.is_correct) for e in episodes if e.is_correct is not None]
        if correct:
            metrics["val/accuracy"] = float(np.mean(correct))
        if rollout.val_n > 1 and self.multiagent is None:
            metrics.update(self._validate_pass_at_k(seeds, rows, sampling_seed))
        metrics["time/validation_s"] = time.perf_counter() - started
        return metrics

    def _validate_pass_at_k(
        self, seeds: list[int], rows: list[dict[str, Any]] | None, sampling_seed: int
    ) -> dict[str, float]:
        n = self.config.rollout.val_n
        repeated_seeds = [seed for seed in seeds for _ in range(n)]
        repeated_rows = [row for row in rows for _ in range(n)] if rows is not None else None
        episodes = self.sampler.sample(
            repeated_seeds,
            self.config.rollout.temperature,
            sampling_seed + 1,
            **rows_given(repeated_rows),
        ).episodes
        scores = compute_pass_at_k(episodes)
        return {f"val/{key}": value for key, value in scores.items() if key.startswith("pass@")}

    @property
    def validates_held_out(self) -> bool:
        """Whether the run validates on held-out rows before its first and after its last step."""
        return self.data.val is not None and self.config.trainer.validate_held_out

    def _resume(self) -> None:
        state = checkpoint.load_latest(self.output / "checkpoints")
        if state is None:
            return
        missing = checkpoint.missing_tensors(self.model, state.model)
        if missing:
            raise RuntimeError(f"checkpoint lacks {len(missing)} trained tensors (another model?)")
        self.model.load_state_dict(state.model, strict=False)
        self.optimizer.load_state_dict(state.optimizer)
        if self.value_head is not None and state.value_head is not None:
            self.value_head.load_state_dict(state.value_head)
        checkpoint.restore_rng(state.rng)
        if self.role_baselines is not None:
            self.role_baselines.values = dict(state.extra.get(ROLE_BASELINES, {}))
        self._restored_played = [PlayedStep.from_dict(d) for d in state.extra.get(PENDING_KEY, [])]
        self.curriculum.restore(state.extra.get(CURRICULUM_KEY))
        self.completed_steps = state.step

    def save_checkpoint(self) -> Path:
        state = checkpoint.TrainState(
            step=self.completed_steps,
            model=checkpoint.trainable_state(self.model),
            optimizer=self.optimizer.state_dict(),
            value_head=self.value_head.state_dict() if self.value_head is not None else None,
            rng=checkpoint.rng_states(),
            extra=self._checkpoint_extra(),
        )
        return checkpoint.save(
            self.output / "checkpoints", state, self.config.trainer.keep_checkpoints
        )

    def _checkpoint_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.role_baselines is not None:
            extra[ROLE_BASELINES] = dict(self.role_baselines.values)
        if self.multiagent is None:
            extra[CURRICULUM_KEY] = self.curriculum.state.to_dict()
        if self.play_ahead is not None:
            # The episodes played ahead by weights this checkpoint does not hold (async_rollouts).
            pending = self.play_ahead.pending(self.completed_steps)
            extra[PENDING_KEY] = [played.to_dict() for played in pending]
        return extra

    def start_metrics(self) -> dict[str, Any]:
        """The "step 0" row of a fresh run (empty: none): validation before training."""
        if self.config.trainer.val_before_train or self.validates_held_out:
            return self.validate()
        return {}

    def end_metrics(self) -> dict[str, Any]:
        """Metrics measured once more after the last step, into its row."""
        return {}

    def _plotted_rates(self) -> dict[str, str]:
        """Rates drawn beside the reward: the trained model's success against the others."""
        if self.multiagent is None:
            return {}
        return {
            TRAINED_SUCCESS: "train success rate (trained seats)",
            f"val/{TRAINED_SUCCESS}": "validation success rate (trained seats)",
        }

    def train(self) -> list[dict[str, Any]]:
        """Run to `trainer.steps` (from the last checkpoint with resume).

        Returns the metric rows of the whole run: after a resume, the steps played before it
        (as ``metrics.jsonl`` kept them) come first.
        """
        check_output(self.output)
        lock = self.run_lock or RunLock.acquire(self.output)
        try:
            return self._train_locked()
        finally:
            if lock is not self.run_lock:
                lock.release()

    def _train_locked(self) -> list[dict[str, Any]]:
        trainer = self.config.trainer
        if trainer.resume:
            self._resume()
        save_config(self.config, self.output / "config.yaml")
        log = reporting.MetricsLog(self.output, trainer.tensorboard, self.completed_steps)
        progress, bar = reporting.progress_bar(
            trainer.steps, self.completed_steps, trainer.progress
        )
        rows: list[dict[str, Any]] = list(log.earlier_rows)
        checkpoint_seconds: float | None = None
        try:
            _ = self.judging  # made here, on the run's main thread (see judging)
            if self.plays_apart and self.completed_steps < trainer.steps:
                self.play_ahead = self._start_play_ahead()
            start = self.start_metrics() if self.completed_steps == 0 else {}
            if start:
                start = {"step": 0, **start}
                log.write(start)
                rows.append(start)
            with progress:
                while self.completed_steps < trainer.steps:
                    row = self.train_step(self.completed_steps)
                    self.completed_steps += 1
                    fault_point("after_update", self.completed_steps)
                    periodic = trainer.val_every and self.completed_steps % trainer.val_every == 0
                    last = self.validates_held_out and self.completed_steps == trainer.steps
                    if periodic or last:
                        row.update(self.validate())
                    if self.completed_steps == trainer.steps:
                        row.update(self.end_metrics())
                    if checkpoint_seconds is not None:
                        row["time/checkpoint_s"] = checkpoint_seconds  # the previous save's
                        checkpoint_seconds = None
                    # The step's commit point: its row is durable before the checkpoint moves
                    # `latest`. A kill in between leaves a row past the checkpoint, which the
                    # resume drops and plays again (reporting.reconcile); a kill after it
                    # leaves both. Either way each step ends up in the log exactly once.
                    fault_point("before_row", self.completed_steps)
                    log.write(row)
                    fault_point("after_row", self.completed_steps)
                    rows.append(row)
                    if trainer.save_every and self.completed_steps % trainer.save_every == 0:
                        started = time.perf_counter()
                        self.save_checkpoint()
                        checkpoint_seconds = time.perf_counter() - started
                    progress.update(
                        bar,
                        completed=self.completed_steps,
                        status=f"reward {row['reward_mean']:.2f}  loss {row.get('loss', 0.0):.3f}",
                    )
            if not trainer.save_every or self.completed_steps % trainer.save_every:
                self.save_checkpoint()
        finally:
            self.close()
            log.close()
            reporting.plot_reward_curve(
                self.output / reporting.METRICS_FILE,
                self.output / reporting.CURVE_FILE,
                title=f"{self.config.model.name} on {self.config.env.id} ({self.config.algorithm.name})",
                rates=self._plotted_rates(),
            )
        summary = {
            "steps": self.completed_steps,
            **reporting.run_summary(rows),
            "config": asdict(self.config),
        }
        write_atomic(self.output / "summary.json", json.dumps(summary, indent=1))
        return rows
