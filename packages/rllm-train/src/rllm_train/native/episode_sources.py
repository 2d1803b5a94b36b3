"""Where a native step's episodes come from: a table keyed by how the run plays them.

A run plays in one mode (:data:`MODES`, chosen once by :func:`mode_of`):

=============  =================================================================================
``plain``      the execution engine over the trained model itself (:class:`ExecutionSampler`)
``program``    an agent program behind the gateway, on the trained model (:class:`ProgramSampler`)
``multiagent`` a PettingZoo game, each seat played by its policy (:class:`MultiAgentSampler`)
``tree``       branches from snapshots of each task's episode (:class:`TreeSampler`); validation
               plays whole episodes
``apart``      an engine apart from the trained model, steps played ahead of the trainer
               (``rollout.mode=async`` or ``rollout.engine`` other than local: :class:`PlayedAhead`)
=============  =================================================================================

Every mode plays a step the same way (:func:`play`): the step's plan (made once by the
:class:`StepPlanner`), the step's sampling seed, one group per task unless the sampler chose
them (tree branches), then the judge. The trainer takes a step's :class:`StepEpisodes` from its
source - :class:`PlayedHere` (played when asked) or :class:`PlayedAhead` - and never asks how.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rllm_train.config import TrainConfig
from rllm_train.native.async_rollouts import PlayAhead, PlayedStep, is_stale
from rllm_train.native.engine_apart import snapshot_weights
from rllm_train.native.replicas import replica_metrics, start_engines_apart
from rllm_train.native.sampler import (
    EpisodeSampler,
    ExecutionSampler,
    PolicyServing,
    Rollout,
    RolloutLimits,
    rollout_executor,
)
from rllm_train.run.curriculum import Curriculum, PlannedStep


@dataclass(frozen=True)
class SamplerParts:
    """What every sampler is made of: the trained model and how episodes are played."""

    config: TrainConfig
    model: Any
    tokenizer: Any
    env_factory: Callable[[], Any]
    agent_factory: Callable[[], Any]
    autocast_dtype: Any = None
    multiagent: Any = None  # the seats of a multi-agent game (native.multiagent_setup)
    frozen_players: dict[str, Any] = field(default_factory=dict)
    program: Any = None  # the agent program that plays instead of the agent

    @property
    def limits(self) -> RolloutLimits:
        rollout = self.config.rollout
        return RolloutLimits(
            max_turns=rollout.max_turns,
            max_response_tokens=rollout.max_response_tokens,
            max_prompt_tokens=rollout.max_prompt_tokens,
            top_p=rollout.top_p,
            dispatch=rollout.dispatch,
            compaction=rollout.compaction,
        )

    @property
    def max_batch_size(self) -> int:
        """A step's (or validation's) episodes all fit in one batch."""
        rollout = self.config.rollout
        return max(rollout.tasks_per_step * rollout.n, self.config.trainer.val_tasks)

    def serving(self, max_batch_size: int | None = None) -> PolicyServing:
        """The trained model served by a LocalEngine on itself, with a batch of
        `max_batch_size` (None: :attr:`max_batch_size`)."""
        return PolicyServing.on_model(
            self.model,
            self.tokenizer,
            max_batch_size=max_batch_size or self.max_batch_size,
            autocast_dtype=self.autocast_dtype,
        )


# -- the samplers ------------------------------------------------------------------------------
def execution_sampler(parts: SamplerParts, apart: Any = None) -> ExecutionSampler:
    """The plain sampler: over the trained model itself, its episodes run where
    ``rollout.executor`` says; or over `apart`, an engine apart from the model, run inline."""
    if apart is None:
        serving = parts.serving()
        executor = rollout_executor(parts.config.rollout, parts.config.env)
    else:
        serving, executor = PolicyServing(parts.model, parts.tokenizer, apart), "inline"
    return ExecutionSampler(
        serving, parts.env_factory, parts.agent_factory, parts.limits, executor=executor
    )


def program_sampler(parts: SamplerParts) -> EpisodeSampler:
    from rllm_train.native.program_sampler import ProgramSampler

    program = parts.config.program
    return ProgramSampler(
        parts.serving(),
        parts.program,
        parts.env_factory,
        parts.limits,
        timeout=program.timeout or None,
        retries=program.retries,
    )


def multiagent_sampler(parts: SamplerParts) -> EpisodeSampler:
    from rllm_train.native.multiagent_sampler import MultiAgentSampler, seat_batch

    return MultiAgentSampler(
        parts.serving(seat_batch(parts.max_batch_size, parts.multiagent)),
        parts.multiagent,
        parts.agent_factory,
        parts.limits,
        frozen=parts.frozen_players,
        env_factory=parts.env_factory,
    )


def tree_sampler(parts: SamplerParts) -> EpisodeSampler:
    from rllm_train.native.tree import TreeSampler

    return TreeSampler(
        parts.serving(),
        parts.env_factory,
        parts.agent_factory,
        parts.limits,
        branches=parts.config.rollout.n,
        branch_turns=parts.config.rollout.tree.branch_turns,
    )


# -- the modes -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mode:
    """How a mode plays: `sampler` validates, and plays the steps unless `step_sampler` does
    (tree) or they are played ahead on an engine apart."""

    sampler: Callable[[SamplerParts], EpisodeSampler]
    step_sampler: Callable[[SamplerParts], EpisodeSampler] | None = None
    plays_ahead: bool = False


MODES: dict[str, Mode] = {
    "plain": Mode(execution_sampler),
    "program": Mode(program_sampler),
    "multiagent": Mode(multiagent_sampler),
    "tree": Mode(execution_sampler, step_sampler=tree_sampler),
    "apart": Mode(execution_sampler, plays_ahead=True),
}


def plays_apart(config: TrainConfig) -> bool:
    """Whether training episodes come from an engine apart from the trained model."""
    return config.rollout.mode == "async" or config.rollout.engine != "local"


# The first mode whose rule holds, in this order (the config refuses the combinations that
# would hold for two: a program or a game played apart, a tree played apart...); else plain.
MODE_RULES: tuple[tuple[str, Callable[[TrainConfig, bool, bool], bool]], ...] = (
    ("program", lambda config, multiagent, program: program),
    ("multiagent", lambda config, multiagent, program: multiagent),
    ("tree", lambda config, multiagent, program: config.rollout.tree.enabled),
    ("apart", lambda config, multiagent, program: plays_apart(config)),
)


def mode_of(config: TrainConfig, *, multiagent: bool, program: bool) -> str:
    return next((name for name, holds in MODE_RULES if holds(config, multiagent, program)), "plain")


# -- planning and playing a step -----------------------------------------------------------------
class StepPlanner:
    """Each step's plan - the curriculum's tasks, each `n` times in a row (its group) - made
    once, whichever thread asks first (the trainer, or the player of steps played ahead)."""

    def __init__(self, curriculum: Curriculum, n: int) -> None:
        self.curriculum = curriculum
        self.n = n
        self._plans: dict[int, PlannedStep] = {}
        self._lock = threading.Lock()

    def plan(self, step: int) -> PlannedStep:
        with self._lock:
            if step not in self._plans:
                self._plans[step] = self.curriculum.plan(step).repeated(self.n)
            return self._plans[step]

    def done(self, step: int) -> None:
        """Forget `step`'s plan (it was trained on)."""
        with self._lock:
            self._plans.pop(step, None)


def rows_given(rows: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
    """``tasks=rows`` for a sampler call with rows; samplers that only take seeds (the
    multi-agent one, plug-ins) never see the keyword."""
    return {"tasks": rows} if rows is not None else {}


def with_groups(rollout: Rollout, plan: PlannedStep) -> Rollout:
    """`rollout` with the group of each episode: the sampler's, else one per task seed."""
    if rollout.groups is not None:
        return rollout
    return dataclasses.replace(rollout, groups=[str(seed) for seed in plan.seeds])


Judge = Callable[[Rollout, list[str], str], Rollout]


def play(
    sampler: EpisodeSampler,
    plan: PlannedStep,
    *,
    temperature: float,
    sampling_seed: int,
    judge: Judge,
    log_name: str,
) -> Rollout:
    """The plan's episodes, grouped and judged (the judge sees the groups it ranks)."""
    rollout = sampler.sample(plan.seeds, temperature, sampling_seed, **rows_given(plan.rows))
    rollout = with_groups(rollout, plan)
    return judge(rollout, list(rollout.groups or []), log_name)


@dataclass
class StepEpisodes:
    """A step's episodes as the trainer trains on them."""

    rollout: Rollout  # grouped and judged
    plan: PlannedStep  # one entry per episode
    played_by: int  # the weights version that played them
    origin: dict[str, float] = field(default_factory=dict)  # where they came from (metrics)

    @property
    def episodes(self) -> list:
        return self.rollout.episodes

    @property
    def groups(self) -> list[str]:
        return list(self.rollout.groups or [])


class PlayedHere:
    """Each step played when the trainer takes it, by the sampler `sampler()` returns then
    (made on first use); `made()` is that sampler if it was made yet, else None."""

    def __init__(
        self,
        sampler: Callable[[], EpisodeSampler],
        made: Callable[[], EpisodeSampler | None],
        play_step: Callable[[EpisodeSampler, int], Rollout],
        planner: StepPlanner,
    ) -> None:
        self._sampler = sampler
        self._made = made
        self._play_step = play_step
        self.planner = planner

    @property
    def generating(self) -> EpisodeSampler | None:
        """The sampler whose engine played the steps (None: none played yet)."""
        return self._made()

    def take(self, step: int) -> StepEpisodes:
        rollout = self._play_step(self._sampler(), step)
        return StepEpisodes(rollout, self.planner.plan(step), step)

    def publish(self, model: Any, version: int) -> None:
        """Nothing to hand over: the steps are played by the trained model itself."""

    def pending(self, version: int) -> list[PlayedStep]:
        return []

    def close(self) -> None:
        """The samplers are the trainer's to close."""


class PlayedAhead:
    """Steps played ahead of the trainer on an engine apart, at most ``rollout.max_staleness``
    updates behind it (:mod:`.async_rollouts`), from the weights the trainer publishes."""

    def __init__(
        self,
        parts: SamplerParts,
        play_step: Callable[[EpisodeSampler, int], Rollout],
        planner: StepPlanner,
        *,
        version: int,
        restored: list[PlayedStep],
    ) -> None:
        config = parts.config
        apart = start_engines_apart(
            config,
            parts.model,
            parts.tokenizer,
            version=version,
            max_batch_size=parts.max_batch_size,
            autocast_dtype=parts.autocast_dtype,
        )
        self.planner = planner
        self.sampler = execution_sampler(parts, apart=apart.engine)
        # Each played step's rollout/replica_* metrics (rollout.engine_replicas > 1), taken by
        # the player as the step ends and handed out with it.
        self._replica_rows: dict[int, dict[str, float]] = {}
        rollout = config.rollout
        try:
            self.play_ahead = PlayAhead(
                apart,
                lambda step: self._play(play_step, step),
                first_step=version,
                last_step=config.trainer.steps,
                max_staleness=rollout.max_staleness if rollout.mode == "async" else 0,
                partial_rollouts=rollout.partial_rollouts,
                restored=restored,
            )
        except BaseException:
            self.sampler.close()
            raise

    @property
    def generating(self) -> EpisodeSampler:
        return self.sampler

    def _play(self, play_step: Callable[[EpisodeSampler, int], Rollout], step: int) -> Rollout:
        """On the player's thread: step `step`'s episodes, and what each replica did for them."""
        rollout = play_step(self.sampler, step)
        self._replica_rows[step] = replica_metrics(self.sampler.engine)
        return rollout

    def take(self, step: int) -> StepEpisodes:
        played, waited = self.play_ahead.take(step)
        plan = self.planner.plan(step)
        # Episodes older than max_staleness allows: only from a checkpoint written under a
        # larger max_staleness (the player never starts a step on older weights).
        keep = [
            not is_stale(episode, step, self.play_ahead.max_staleness)
            for episode in played.rollout.episodes
        ]
        rollout = with_groups(played.rollout, plan)
        rollout = dataclasses.replace(
            rollout,
            episodes=[e for e, kept in zip(rollout.episodes, keep, strict=True) if kept],
            groups=[g for g, kept in zip(rollout.groups or [], keep, strict=True) if kept],
        )
        origin = {
            "async/wait_s": waited,
            "async/version": played.version,
            "async/dropped_stale": keep.count(False),
            **self._replica_rows.pop(step, {}),  # none for a step a checkpoint kept
        }
        return StepEpisodes(rollout, plan.kept(keep), played.version, origin)

    def publish(self, model: Any, version: int) -> None:
        """Hand the weights after `version` updates to the engine apart, if a step needs them."""
        if self.play_ahead.wants(version):
            self.play_ahead.publish(snapshot_weights(model, version))

    def pending(self, version: int) -> list[PlayedStep]:
        """The steps played by weights older than `version`: what a checkpoint keeps."""
        return self.play_ahead.pending(version)

    def close(self) -> None:
        self.play_ahead.close()
        self.sampler.close()
