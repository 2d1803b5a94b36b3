"""The native training loop: rollouts -> advantages -> clipped policy update, step after step.

Each step takes its episodes from the run's episode source (:mod:`.episode_sources`: played
now by the trained model itself through the execution engine, an agent program, a multi-agent
game or tree branches, or played ahead on an engine apart), with tasks from the run's plan
(:mod:`rllm_train.run.tasks`: a pure function of the run seed, the step and the curriculum's
success estimates, which checkpoints keep, so a resumed run sees exactly the data the
uninterrupted one would). A step whose failed episodes pass ``trainer.max_failure_rate`` stops
the run (:mod:`rllm_train.run.failures`). The rest are turned into training sequences and
handed to the policy update (:mod:`.policy_update`: verl's estimator and policy loss,
gradients accumulated over micro-batches). The loop validates, checkpoints and writes a row of
metrics (:mod:`.step_metrics`) after each step.

A multi-agent env (``env.id`` a PettingZoo-style module such as ``kuhn_poker_v0``) trains only
the trained model's seats; ``algorithm.name=rae`` baselines each role with its own running
mean (:mod:`~rllm_train.native.role_advantages`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
from rllm_agents.agents.base import BaseAgent
from rllm_agents.run_folder import RunLock, check_output, fault_point
from rllm_agents.types import Episode

from rllm_train.config import ConfigError, TrainConfig, save_config
from rllm_train.native import checkpoint, rollout_correction
from rllm_train.native.async_rollouts import PENDING_KEY, PlayedStep
from rllm_train.native.batch import episodes_to_sequences, to_tensors, trained_trajectories
from rllm_train.native.engine_apart import check_engine_apart
from rllm_train.native.episode_sources import (
    MODES,
    PlayedAhead,
    PlayedHere,
    SamplerParts,
    StepEpisodes,
    StepPlanner,
    mode_of,
    play,
    plays_apart,
)
from rllm_train.native.judging import EpisodeJudging, check_judge_run
from rllm_train.native.models import load_for_training
from rllm_train.native.multiagent_setup import multiagent_setup
from rllm_train.native.opponents import load_frozen_models
from rllm_train.native.policy_update import PolicyUpdate, informative_rows  # noqa: F401
from rllm_train.native.role_advantages import RoleBaselines
from rllm_train.native.sampler import EpisodeSampler, Rollout
from rllm_train.native.step_metrics import (
    AGENT_SCORING,
    StepTimes,
    game_scoring,
    progress_status,
    step_row,
)
from rllm_train.native.tree import check_tree_env
from rllm_train.native.validation import validate
from rllm_train.run import reporting
from rllm_train.run.curriculum import CURRICULUM_KEY, step_task_seeds  # noqa: F401
from rllm_train.run.failures import check_failure_rate, step_failures
from rllm_train.run.setup import RunSetup, setup_run
from rllm_train.run.tasks import step_sampling_seed, validation_seeds  # noqa: F401

ROLE_BASELINES = "role_baselines"  # where a checkpoint keeps RAE's baselines


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
        setup: RunSetup | None = None,
    ) -> None:
        self.config = config
        # The CLI locks the folder before anything slow and hands its lock over; without one,
        # train() takes it for the run's life.
        self.run_lock = run_lock
        self.output = Path(config.trainer.output)
        # Cheap checks first: a bad env id or output dir fails before any model loads.
        self.setup = setup or setup_run(
            config, backend="native", agent_class=agent_class, agent_args=agent_args
        )
        self.multiagent = multiagent_setup(config)
        if env_factory is None:
            env_factory = (
                self.multiagent.env_factory
                if self.multiagent is not None
                else self.setup.env.factory()
            )
        self.env_factory = env_factory
        # The rows trained and validated on (data.train / data.val, or the env's shipped
        # train/test pair); multi-agent games are drawn from seeds.
        self.data = self.setup.data
        self.program = self.setup.program
        # Which tasks each step plays (uniform, or weighted by measured success), planned once.
        self.curriculum = self.setup.curriculum()
        self.planner = StepPlanner(self.curriculum, config.rollout.n)
        self.mode = mode_of(
            config, multiagent=self.multiagent is not None, program=self.program is not None
        )
        check_engine_apart(config)
        if self.multiagent is not None and plays_apart(config):
            raise ConfigError(
                "rollout.mode / rollout.engine: multi-agent games are played by the trained "
                "model itself (and its frozen copies); leave rollout.mode=sync, "
                "rollout.engine=local"
            )
        check_judge_run(config, self.multiagent)
        self.agent_factory = self.setup.agent  # an AgentSpec: called, it makes the agent
        check_tree_env(config, None if self.multiagent is not None else env_factory)
        latest = self.output / "checkpoints" / checkpoint.LATEST
        if latest.exists() and not config.trainer.resume:
            raise ConfigError(
                f"trainer.output: {self.output} already holds a run; pass --resume to continue "
                "it or choose another --output"
            )
        rollout_correction.check_with_verl(config.algorithm.rollout_correction)
        self._load_models()
        self.completed_steps = 0
        self.last_episodes: list[Episode] = []
        self._sampler: EpisodeSampler | None = None
        self._step_sampler: EpisodeSampler | None = None  # tree: the training episodes
        self.source: PlayedHere | PlayedAhead = self._played_here()
        self._restored_played: list[PlayedStep] = []
        self._checkpoint_rows: list[dict[str, Any]] = []  # the resumed checkpoint's own rows
        self._judging: EpisodeJudging | None = None
        self.scoring = game_scoring() if self.multiagent is not None else AGENT_SCORING

    def _load_models(self) -> None:
        """The policy and its update (:func:`~.models.load_for_training`), the frozen players,
        RAE's baselines."""
        loaded = load_for_training(self.config, learns_values=self.setup.algorithm.learns_values)
        self.device, self.model, self.tokenizer = loaded.device, loaded.model, loaded.tokenizer
        self.autocast_dtype, self.pad_id = loaded.autocast_dtype, loaded.pad_id
        self.value_head, self.reference = loaded.value_head, loaded.reference
        self.optimizer = loaded.optimizer
        # Frozen players are copied now, before any update (or resume) changes the weights.
        self.frozen_players = (
            load_frozen_models(
                self.multiagent.frozen_models, self.model, self.tokenizer, self.device
            )
            if self.multiagent is not None
            else {}
        )
        self.role_baselines = (
            RoleBaselines(self.config.algorithm.rae_decay)
            if self.setup.algorithm.role_baselines
            else None
        )
        self.policy_update = PolicyUpdate(
            self.config,
            self.model,
            self.optimizer,
            device=self.device,
            autocast_dtype=self.autocast_dtype,
            value_head=self.value_head,
            reference=self.reference,
        )

    # -- where episodes come from --------------------------------------------------------------
    def _sampler_parts(self) -> SamplerParts:
        return SamplerParts(
            self.config,
            self.model,
            self.tokenizer,
            self.env_factory,
            self.agent_factory,
            autocast_dtype=self.autocast_dtype,
            multiagent=self.multiagent,
            frozen_players=self.frozen_players,
            program=self.program,
        )

    @property
    def sampler(self) -> EpisodeSampler:
        """The sampler that validates, and plays the steps where nothing else does (made on
        first use; assign another to plug one in)."""
        if self._sampler is None:
            self._sampler = MODES[self.mode].sampler(self._sampler_parts())
        return self._sampler

    @sampler.setter
    def sampler(self, sampler: EpisodeSampler) -> None:
        self._sampler = sampler  # the one it replaces is the caller's to close

    @property
    def training_sampler(self) -> EpisodeSampler:
        """The sampler that plays the steps here: :attr:`sampler`, or with rollout.tree the
        tree sampler (branch groups; validation still plays whole episodes)."""
        make = MODES[self.mode].step_sampler
        if make is None:
            return self.sampler
        if self._step_sampler is None:
            self._step_sampler = make(self._sampler_parts())
        return self._step_sampler

    @property
    def settings(self):
        return self.policy_update.settings

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

    def _play_step(self, sampler: EpisodeSampler, step: int) -> Rollout:
        """Step `step`'s episodes, played by `sampler` (on the player's thread when ahead)."""
        return play(
            sampler,
            self.planner.plan(step),
            temperature=self.config.rollout.temperature,
            sampling_seed=step_sampling_seed(self.config.trainer.seed, step),
            judge=self._judged,
            log_name=f"step_{step + 1:04d}",
        )

    def _played_here(self) -> PlayedHere:
        """Steps played when taken, by the training sampler (made on first use)."""
        made = MODES[self.mode].step_sampler is not None
        return PlayedHere(
            lambda: self.training_sampler,
            lambda: self._step_sampler if made else self._sampler,
            self._play_step,
            self.planner,
        )

    def _episodes_of(self, step: int) -> StepEpisodes:
        return self.source.take(step)

    def close(self) -> None:
        """Stop the samplers' engines (a later step makes a new one)."""
        self.source.close()
        self.source = self._played_here()
        for sampler in (self._sampler, self._step_sampler):
            if sampler is not None:
                sampler.close()
        self._sampler = self._step_sampler = None
        if self._judging is not None:
            self._judging.close()
            self._judging = None

    # -- one step ------------------------------------------------------------------------------
    def update(self, batch) -> dict[str, float]:
        """One policy update on `batch` (:mod:`.policy_update`), corrected for the engine that
        played the steps when it is not the trained model itself."""
        generating = self.source.generating
        shares = rollout_correction.samples_trained_weights(generating, self.model)
        corrects = rollout_correction.correction_enabled(
            self.config.algorithm.rollout_correction, shares
        )
        return self.policy_update(batch, version=self.completed_steps, corrects=corrects)

    def train_step(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        played = self._episodes_of(step)
        episodes, groups = played.episodes, played.groups
        self.last_episodes = episodes  # for inspection (benchmarks, debugging)
        if self.config.trainer.save_episodes:
            self.save_episodes(step, episodes, played.played_by)
        rollout_seconds = time.perf_counter() - started
        failures = step_failures((e.failure, e.error) for e in episodes)
        # Episodes that say nothing about the policy stop the run, not train it on fake zeros.
        check_failure_rate(failures, self.config.trainer.max_failure_rate, step + 1)
        extra = dict(played.origin)
        if self.multiagent is None:
            # Before this step's weights are published: the steps played ahead plan with it.
            self.curriculum.record(step, episodes, played.plan.keys)
            extra.update(self.curriculum.metrics(played.plan, episodes, groups))
        sequences = episodes_to_sequences(
            episodes,
            groups,
            self.config.algorithm.sequence_mode,
            self._role_advantages(episodes, groups),
        )
        update_started = time.perf_counter()
        losses = {}
        if sequences:
            batch = to_tensors(sequences, self.pad_id, policy_version=played.played_by)
            losses = self.update(batch)
        self.source.publish(self.model, self.completed_steps + 1)
        self.planner.done(step)
        update_seconds = time.perf_counter() - update_started
        extra.update(self.role_baselines.metrics() if self.role_baselines is not None else {})
        times = StepTimes(started, rollout_seconds, update_seconds)
        return step_row(
            step, played.rollout, sequences, losses, failures, self.scoring, times, extra
        )

    def save_episodes(
        self, step: int, episodes: list[Episode], played_by: int | None = None
    ) -> None:
        """Write a step's sampled episodes, stamped with the weights that played them (the
        model after `played_by` updates: `step` unless played ahead)."""
        version = step if played_by is None else played_by
        reporting.write_step_episodes(self.output, step, episodes, self.config.model.name, version)

    def _role_advantages(self, episodes: list[Episode], groups: list[str]) -> list[float] | None:
        """RAE's advantage for each trained trajectory (None for verl's estimators)."""
        if self.role_baselines is None:
            return None
        pairs = trained_trajectories(episodes, groups)
        return self.role_baselines.trajectory_advantages(self.config.env.id, pairs)

    # -- validation -----------------------------------------------------------------------------
    def validate(self) -> dict[str, float]:
        """The validation metrics of the weights now (:mod:`.validation`)."""
        return validate(
            self.sampler,
            self.config,
            self.data,
            version=self.completed_steps,
            scoring=self.scoring,
            judge=self._judged,
            pass_at_k=self.multiagent is None,
            output=self.output,
        )

    @property
    def validates_held_out(self) -> bool:
        """Whether the run validates on held-out rows before its first and after its last step."""
        return self.data.val is not None and self.config.trainer.validate_held_out

    def start_metrics(self) -> dict[str, Any]:
        """The "step 0" row of a fresh run (empty: none): validation before training."""
        if self.config.trainer.val_before_train or self.validates_held_out:
            return self.validate()
        return {}

    def end_metrics(self) -> dict[str, Any]:
        """Metrics measured once more after the last step, into its row."""
        return {}

    # -- checkpoints ----------------------------------------------------------------------------
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
        self._checkpoint_rows = state.metrics_rows
        self.completed_steps = state.step

    def save_checkpoint(self, rows: list[dict[str, Any]]) -> Path:
        """A checkpoint of the steps completed; `rows` are the run's metrics rows so far."""
        state = checkpoint.TrainState(
            step=self.completed_steps,
            model=checkpoint.trainable_state(self.model),
            optimizer=self.optimizer.state_dict(),
            value_head=self.value_head.state_dict() if self.value_head is not None else None,
            rng=checkpoint.rng_states(),
            extra=self._checkpoint_extra(),
            metrics_rows=list(rows),
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
        if isinstance(self.source, PlayedAhead):
            # The episodes played ahead by weights this checkpoint does not hold.
            pending = self.source.pending(self.completed_steps)
            extra[PENDING_KEY] = [played.to_dict() for played in pending]
        return extra

    # -- the loop -------------------------------------------------------------------------------
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
        save_config(self.config, self.output / reporting.CONFIG_FILE)
        log = reporting.MetricsLog(
            self.output, trainer.tensorboard, self.completed_steps, self._checkpoint_rows
        )
        progress, bar = reporting.progress_bar(
            trainer.steps, self.completed_steps, trainer.progress
        )
        rows, finished = list(log.earlier_rows), False
        try:
            _ = self.judging  # made here, on the run's main thread (see judging)
            if MODES[self.mode].plays_ahead and self.completed_steps < trainer.steps:
                self.source = PlayedAhead(
                    self._sampler_parts(),
                    self._play_step,
                    self.planner,
                    version=self.completed_steps,
                    restored=self._restored_played,
                )
            start = self.start_metrics() if self.completed_steps == 0 else {}
            if start:
                start = {"step": 0, **start}
                log.write(start)
                rows.append(start)

            def shown(row: dict[str, Any]) -> None:
                status = progress_status(row)
                progress.update(bar, completed=self.completed_steps, status=status)

            with progress:
                self._run_steps(log, rows, shown)
            if not trainer.save_every or self.completed_steps % trainer.save_every:
                self.save_checkpoint(rows)
            finished = True
        finally:
            self.close()  # engines and servers stop before the final model is written
            log.close()
            # What the run did, also when it stopped early (failed episodes, an error).
            reporting.plot_run_curve(self.output, self.config, rates=self.scoring.plotted_rates)
            reporting.write_summary(self.output, rows, "native", asdict(self.config))
        if finished:
            checkpoint.save_final_model(
                self.model, self.tokenizer, self.output / checkpoint.FINAL_MODEL_FOLDER
            )
        return rows

    def _run_steps(
        self, log: reporting.MetricsLog, rows: list[dict[str, Any]], shown: Callable
    ) -> None:
        """Step after step to ``trainer.steps``: train, validate when due, write the row, save
        a checkpoint when due."""
        trainer = self.config.trainer
        checkpoint_seconds: float | None = None
        while self.completed_steps < trainer.steps:
            row = self.train_step(self.completed_steps)
            self.completed_steps += 1
            fault_point("after_update", self.completed_steps)
            periodic = trainer.val_every and self.completed_steps % trainer.val_every == 0
            last = self.completed_steps == trainer.steps
            if periodic or (last and self.validates_held_out):
                row.update(self.validate())
            if last:
                row.update(self.end_metrics())
            if checkpoint_seconds is not None:
                row["time/checkpoint_s"] = checkpoint_seconds  # the previous save's
                checkpoint_seconds = None
            # The step's commit point: its row is durable before the checkpoint moves
            # `latest`. A kill in between leaves a row past the checkpoint, which the resume
            # drops and plays again (reporting.reconcile); a kill after it leaves both. Either
            # way each step ends up in the log exactly once.
            fault_point("before_row", self.completed_steps)
            log.write(row)
            fault_point("after_row", self.completed_steps)
            rows.append(row)
            if trainer.save_every and self.completed_steps % trainer.save_every == 0:
                started = time.perf_counter()
                self.save_checkpoint(rows)
                checkpoint_seconds = time.perf_counter() - started
            shown(row)
