"""Which tasks a training step plays: uniformly, or weighted by each task's measured success.

GRPO learns only from groups whose rewards differ; a task the policy always solves, or never
does, yields a group of equal rewards and no gradient. A curriculum keeps a success estimate per
training task and draws the next steps' tasks towards those still worth playing.

The pool is what the run trains on: the training rows (``data.train`` or the env's shipped
train split), each known by its ``task_id`` (by its index when the rows' ids are missing or not
unique); for an env that draws its tasks from seeds, a fixed pool of ``curriculum.seed_pool``
env seeds (never a validation seed), each seed being a task (the env contract: the same seed,
the same task). A task's observation at a step is the share of its group's ``rollout.n``
episodes with a reward of at least ``curriculum.success_reward`` (episodes that ended in an
infrastructure failure or an error say nothing about the policy and are left out).

Per task, two moving averages of that share: ``fast`` (step ``fast_rate``; it is the success
estimate p) and ``slow`` (``slow_rate``), both starting at the first observation, plus the
number of observations and the last step played. A weighting (:data:`WEIGHTINGS`, by
``curriculum.kind``) scores each task it has seen:

* ``learning_progress``: ``|fast - slow|``, high where success is moving either way;
* ``plr``: ``p * (1 - p)``, the variance of a success draw: high where a group is likely to
  hold both outcomes, zero for a task always or never solved.

Probabilities (prioritised level replay's split): a task not yet played keeps its uniform share
``1/N``; the played ones share the rest, ``k/N`` for ``k`` of them, in proportion to
``(1 - staleness_mix) * score ** (1/temperature) + staleness_mix * staleness`` (each part
normalised over the played tasks; staleness is the steps since the task was last played; all
scores 0: evenly). Then ``uniform_mix`` of the whole is spread evenly, so every task keeps at
least ``uniform_mix / N``. A step draws ``rollout.tasks_per_step`` distinct tasks with these
probabilities. ``uniform`` changes nothing in what a run plays (the run's own uniform draw) and
still keeps the estimates, for the same metrics.

Determinism: step ``s`` draws with a generator seeded by the run seed and ``s`` alone, from the
estimates of steps before ``s - lag`` alone (``lag`` = ``rollout.max_staleness`` when episodes
are played ahead, ``rollout.mode=async``, else 0: the player picks step ``s``'s tasks when the
weights after update ``s - lag`` are published, and the trainer records a step's observations
before it publishes). The estimates are in each checkpoint, so a resumed run draws exactly what
an uninterrupted one would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from rllm_agents.types import Episode
from rllm_envs.core.task_set import Row, TaskSet

from rllm_train.config import ConfigError, TrainConfig
from rllm_train.config.curriculum import CurriculumConfig
from rllm_train.datasets import RunData, step_row_indices

CURRICULUM_KEY = "curriculum"  # where a checkpoint's extra keeps the estimates
CHOICE_STREAM = 13  # seeds a step's weighted draw apart from the other streams
POOL_STREAM = 17  # seeds the seed pool of a run without task rows
SEED_RANGE = 2**31 - 1  # env seeds are drawn below it (as the step's task seeds are)


def step_task_seeds(run_seed: int, step: int, count: int) -> list[int]:
    """The task seeds of training step `step` (0-based): fixed by the run seed and the step."""
    generator = np.random.default_rng([run_seed, step])
    return [int(seed) for seed in generator.integers(0, SEED_RANGE, size=count)]


# -- estimates --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskRecord:
    """What the curriculum knows of one task."""

    fast: float  # moving average of the success share, step fast_rate: the estimate p
    slow: float  # the same, step slow_rate
    plays: int  # observations folded in
    last_step: int  # the last step (0-based) that played it

    def observed(self, success: float, step: int, settings: CurriculumConfig) -> TaskRecord:
        return TaskRecord(
            fast=self.fast + settings.fast_rate * (success - self.fast),
            slow=self.slow + settings.slow_rate * (success - self.slow),
            plays=self.plays + 1,
            last_step=step,
        )


def first_record(success: float, step: int) -> TaskRecord:
    return TaskRecord(fast=success, slow=success, plays=1, last_step=step)


def fold(
    records: Mapping[str, TaskRecord],
    observations: Mapping[str, float],
    step: int,
    settings: CurriculumConfig,
) -> dict[str, TaskRecord]:
    """`records` with step `step`'s observations ({task: success share}) folded in."""
    folded = dict(records)
    for key, success in observations.items():
        known = folded.get(key)
        folded[key] = (
            first_record(success, step)
            if known is None
            else known.observed(success, step, settings)
        )
    return folded


# -- weightings -------------------------------------------------------------------------------
def learning_progress(record: TaskRecord) -> float:
    return abs(record.fast - record.slow)


def success_variance(record: TaskRecord) -> float:
    return record.fast * (1.0 - record.fast)


# curriculum.kind -> the score of a played task ("uniform" has none: the run's own draw).
WEIGHTINGS: Mapping[str, Callable[[TaskRecord], float]] = {
    "learning_progress": learning_progress,
    "plr": success_variance,
}


def _normalised(values: np.ndarray) -> np.ndarray:
    total = values.sum()
    return values / total if total > 0 else np.full(len(values), 1.0 / len(values))


def task_probabilities(
    records: Sequence[TaskRecord | None],
    step: int,
    score: Callable[[TaskRecord], float],
    settings: CurriculumConfig,
) -> np.ndarray:
    """The probability of each pool task (`records` in pool order, None: never played) being
    drawn at step `step` (see the module doc)."""
    size = len(records)
    probabilities = np.full(size, 1.0 / size)
    played = [index for index, record in enumerate(records) if record is not None]
    if played:
        scores = np.array([score(records[index]) for index in played], dtype=np.float64)
        top = scores.max()
        # Scaled by the largest first: a sharp temperature must not underflow to all zeros.
        by_score = _normalised(
            (scores / top) ** (1.0 / settings.temperature) if top > 0 else scores
        )
        staleness = np.array([step - records[index].last_step for index in played], dtype=float)
        by_staleness = _normalised(staleness)
        mix = settings.staleness_mix
        replay = (1.0 - mix) * by_score + mix * by_staleness
        probabilities[played] = len(played) / size * replay
    return (1.0 - settings.uniform_mix) * probabilities + settings.uniform_mix / size


def entropy(probabilities: np.ndarray) -> float:
    positive = probabilities[probabilities > 0]
    return float(-(positive * np.log(positive)).sum())


# -- the pool ---------------------------------------------------------------------------------
def row_keys(rows: TaskSet) -> tuple[str, ...]:
    """Each row's task id, or ``row-<index>`` for all when the ids are missing or repeated."""
    ids = [row.get("task_id") for row in rows.rows]
    if all(task_id is not None for task_id in ids) and len({str(i) for i in ids}) == len(ids):
        return tuple(str(task_id) for task_id in ids)
    return tuple(f"row-{index}" for index in range(len(rows)))


def seed_key(seed: int) -> str:
    return f"seed-{seed}"


def seed_pool(run_seed: int, size: int, avoid: Sequence[int]) -> tuple[int, ...]:
    """`size` distinct env seeds, fixed by the run seed, none of them in `avoid`."""
    generator = np.random.default_rng([run_seed, POOL_STREAM])
    excluded = set(avoid)
    pool: list[int] = []
    while len(pool) < size:
        for seed in generator.integers(0, SEED_RANGE, size=size):
            if int(seed) not in excluded:
                excluded.add(int(seed))
                pool.append(int(seed))
    return tuple(pool[:size])


@dataclass(frozen=True)
class TaskPool:
    """The tasks a weighted curriculum draws from: rows, or env seeds."""

    keys: tuple[str, ...]
    rows: TaskSet | None = None
    seeds: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class PlannedStep:
    """One step's tasks (one entry per task, before the `rollout.n` repeats) and the
    probabilities they were drawn with (None: the run's own uniform draw over no fixed pool)."""

    seeds: list[int]  # the env's reset seed of each task
    rows: list[Row] | None
    keys: list[str]
    probabilities: np.ndarray | None = None

    def repeated(self, n: int) -> PlannedStep:
        """One entry per episode: each task `n` times in a row (its group)."""
        return self.kept([True] * len(self.seeds), n)

    def kept(self, keep: Sequence[bool], n: int = 1) -> PlannedStep:
        """The entries `keep` marks (each `n` times)."""

        def select(values: Sequence[Any]) -> list[Any]:
            return [v for v, k in zip(values, keep, strict=True) if k for _ in range(n)]

        rows = select(self.rows) if self.rows is not None else None
        return PlannedStep(select(self.seeds), rows, select(self.keys), self.probabilities)


# -- the state a checkpoint keeps -------------------------------------------------------------
@dataclass
class CurriculumState:
    """The estimates of every step before `settled_before`, and the observations of the later
    steps recorded so far (kept apart: a draw lagging behind may not see them yet)."""

    records: dict[str, TaskRecord] = field(default_factory=dict)
    settled_before: int = 0
    recent: dict[int, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": {key: asdict(record) for key, record in self.records.items()},
            "settled_before": self.settled_before,
            "recent": {str(step): dict(seen) for step, seen in self.recent.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CurriculumState:
        return cls(
            records={key: TaskRecord(**value) for key, value in data["records"].items()},
            settled_before=int(data["settled_before"]),
            recent={int(step): dict(seen) for step, seen in data["recent"].items()},
        )

    def as_of(self, before: int, settings: CurriculumConfig) -> dict[str, TaskRecord]:
        """The estimates from the observations of steps before `before` alone - or before
        `settled_before`, if later: a run resumed with a larger lag (max_staleness) than it
        was saved with has only those. Either way, steps already recorded, whatever the
        timing."""
        records = self.records
        for step in range(self.settled_before, before):
            records = fold(records, self.recent.get(step, {}), step, settings)
        return records

    def recorded(
        self,
        step: int,
        observations: Mapping[str, float],
        settle_before: int,
        settings: CurriculumConfig,
    ) -> CurriculumState:
        """This state with step `step`'s observations, the steps before `settle_before`
        folded into the estimates."""
        recent = {**self.recent, step: dict(observations)}
        settle_before = max(settle_before, self.settled_before)
        records = self.records
        for folded_step in range(self.settled_before, settle_before):
            records = fold(records, recent.pop(folded_step, {}), folded_step, settings)
        return CurriculumState(records, settle_before, recent)


# -- what a step's episodes say -----------------------------------------------------------------
def counts(episode: Episode) -> bool:
    """Whether an episode says something about the policy (not a crash of env or program)."""
    return episode.failure is None and episode.error is None


def group_successes(
    episodes: Sequence[Episode], keys: Sequence[str], success_reward: float
) -> dict[str, float]:
    """{task: share of its counted episodes with reward >= success_reward}; tasks with none
    counted are left out."""
    tallies: dict[str, list[float]] = {}
    for episode, key in zip(episodes, keys, strict=True):
        if counts(episode):
            tallies.setdefault(key, []).append(float(episode.reward >= success_reward))
    return {key: sum(hits) / len(hits) for key, hits in tallies.items()}


def uninformative_share(episodes: Sequence[Episode], groups: Sequence[str]) -> float:
    """The share of the step's groups whose counted episodes all got the same reward (fewer
    than two: the same), which give GRPO-style advantages of 0 and no gradient."""
    rewards: dict[str, list[float]] = {}
    for episode, group in zip(episodes, groups, strict=True):
        bucket = rewards.setdefault(group, [])
        if counts(episode):
            bucket.append(episode.reward)
    if not rewards:
        return 0.0
    flat = sum(len(set(values)) < 2 for values in rewards.values())
    return flat / len(rewards)


# -- the curriculum of a run ----------------------------------------------------------------------
class Curriculum:
    """Plans each step's tasks and keeps the success estimates (see the module doc).

    `plan` may be called from the play-ahead thread while the trainer records: a lock guards
    the state, and a plan depends only on the step and the observations before ``step - lag``,
    never on when it is called.
    """

    def __init__(
        self,
        settings: CurriculumConfig,
        *,
        run_seed: int,
        tasks_per_step: int,
        rows: TaskSet | None,
        pool: TaskPool | None,
        lag: int = 0,
    ) -> None:
        self.settings = settings
        self.run_seed = run_seed
        self.tasks_per_step = tasks_per_step
        self.rows = rows  # the training rows (uniform draws from them too)
        self.pool = pool  # None: uniform over no fixed pool (env seeds)
        self.lag = lag
        self._score = WEIGHTINGS.get(settings.kind)
        self._lock = threading.Lock()
        self._state = CurriculumState()

    # -- state ------------------------------------------------------------------------------
    @property
    def state(self) -> CurriculumState:
        with self._lock:
            return self._state

    def restore(self, data: Mapping[str, Any] | None) -> None:
        """Continue from a checkpoint's state (None: a checkpoint from before curricula)."""
        with self._lock:
            self._state = CurriculumState.from_dict(data) if data else CurriculumState()

    def record(self, step: int, episodes: Sequence[Episode], keys: Sequence[str]) -> None:
        """Step `step`'s episodes (`keys`: each one's task) into the estimates. Call it before
        the weights after this step are published: a lagging plan may then use them."""
        observed = group_successes(episodes, keys, self.settings.success_reward)
        with self._lock:
            # No plan from now on looks before step + 1 - lag: those steps can be folded.
            self._state = self._state.recorded(step, observed, step + 1 - self.lag, self.settings)

    # -- plans --------------------------------------------------------------------------------
    def plan(self, step: int) -> PlannedStep:
        count = self.tasks_per_step
        seeds = step_task_seeds(self.run_seed, step, count)
        if self._score is None:
            return self._uniform_plan(step, seeds)
        assert self.pool is not None
        with self._lock:
            records = self._state.as_of(max(step - self.lag, 0), self.settings)
        probabilities = task_probabilities(
            [records.get(key) for key in self.pool.keys], step, self._score, self.settings
        )
        generator = np.random.default_rng([self.run_seed, step, CHOICE_STREAM])
        picked = [
            int(index)
            for index in generator.choice(
                len(self.pool), size=count, replace=False, p=probabilities
            )
        ]
        keys = [self.pool.keys[index] for index in picked]
        if self.pool.rows is not None:
            rows = [self.pool.rows[index] for index in picked]
            return PlannedStep(seeds, rows, keys, probabilities)
        return PlannedStep([self.pool.seeds[index] for index in picked], None, keys, probabilities)

    def _uniform_plan(self, step: int, seeds: list[int]) -> PlannedStep:
        """The run's own draw: rows fixed by the run seed and the step, else the seeds."""
        if self.rows is None:
            return PlannedStep(seeds, None, [seed_key(seed) for seed in seeds])
        indices = step_row_indices(len(self.rows), self.run_seed, step, len(seeds))
        keys = row_keys(self.rows)
        return PlannedStep(
            seeds,
            [self.rows[index] for index in indices],
            [keys[index] for index in indices],
            np.full(len(self.rows), 1.0 / len(self.rows)),
        )

    # -- metrics ------------------------------------------------------------------------------
    def metrics(
        self, plan: PlannedStep, episodes: Sequence[Episode], groups: Sequence[str]
    ) -> dict[str, float]:
        """A step's curriculum metrics, once its episodes are recorded."""
        with self._lock:
            state = self._state
        latest = max(state.recent, default=state.settled_before - 1)
        records = state.as_of(latest + 1, self.settings)
        metrics = {
            "curriculum/uninformative_groups": uninformative_share(episodes, groups),
            "curriculum/tasks_seen": float(len(records)),
        }
        if records:
            metrics["curriculum/mean_p"] = float(np.mean([r.fast for r in records.values()]))
        if plan.probabilities is not None:
            metrics["curriculum/entropy"] = entropy(plan.probabilities)
        return metrics


def curriculum_for_run(
    config: TrainConfig, data: RunData, *, multiagent: bool, validation_seeds: Sequence[int]
) -> Curriculum:
    """The run's curriculum, once it is checked that its kind can steer this run (a seed pool
    leaves out `validation_seeds`: validation never plays a task the curriculum steers)."""
    settings = config.curriculum
    rollout = config.rollout
    lag = rollout.max_staleness if rollout.mode == "async" else 0
    common = {"run_seed": config.trainer.seed, "tasks_per_step": rollout.tasks_per_step, "lag": lag}
    if not settings.weighted:
        return Curriculum(settings, rows=data.train, pool=None, **common)
    if multiagent:
        raise ConfigError(
            f"curriculum.kind={settings.kind}: a multi-agent game's outcome for the trained "
            "seats depends on who sits in the others as much as on the game; use "
            "curriculum.kind=uniform"
        )
    if data.train is not None:
        pool = TaskPool(row_keys(data.train), rows=data.train)
    elif settings.seed_pool:
        seeds = seed_pool(config.trainer.seed, settings.seed_pool, validation_seeds)
        pool = TaskPool(tuple(seed_key(seed) for seed in seeds), seeds=seeds)
    else:
        raise ConfigError(
            f"curriculum.seed_pool: this run has no task rows (its env draws tasks from seeds), "
            f"so curriculum.kind={settings.kind} needs a finite pool of seeds to weigh; set "
            "curriculum.seed_pool (e.g. 256) or name the rows with data.train"
        )
    if rollout.tasks_per_step > len(pool):
        raise ConfigError(
            f"rollout.tasks_per_step: a weighted curriculum draws distinct tasks, and the pool "
            f"holds {len(pool)}; lower it to {len(pool)} or less"
        )
    return Curriculum(settings, rows=data.train, pool=pool, **common)
