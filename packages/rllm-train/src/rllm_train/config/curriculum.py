"""``curriculum``: which training tasks a native run plays, weighted by measured success.

The sampler kinds themselves live in :mod:`rllm_train.run.curriculum`; only the settings and
their plain-Python checks are here, so that reading a config never imports torch. See
docs/training/curriculum.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNIFORM = "uniform"
# The kinds a config may name (each one's weighting is in rllm_train.run.curriculum).
CURRICULUM_KINDS = (UNIFORM, "learning_progress", "plr")


@dataclass
class CurriculumConfig:
    # uniform: every training task equally likely (the run's usual draw; success is still
    # tracked and reported). learning_progress: tasks whose success rate is changing, by
    # |fast - slow| of two moving averages of it. plr: prioritised level replay, tasks whose
    # groups are likely to disagree, by p * (1 - p) of the success estimate p, mixed with
    # staleness (steps since last played).
    kind: str = UNIFORM
    # An episode with at least this reward counts as a success; a task's observation at a
    # step is the share of its group's episodes that succeeded.
    success_reward: float = 1.0
    # Moving-average step sizes of a task's success estimate: the fast one is the estimate
    # p (1 = the last group's success share); learning progress also keeps the slow one.
    fast_rate: float = 0.5
    slow_rate: float = 0.1
    temperature: float = 1.0  # weights are score ** (1 / temperature): lower = sharper
    staleness_mix: float = 0.1  # share of the played tasks' probability given by staleness
    # Share of all probability spread evenly over the pool: every task keeps at least
    # uniform_mix / (pool size), so none is ever written off.
    uniform_mix: float = 0.05
    # Runs without task rows (the env draws its tasks from seeds): the number of env seeds
    # a non-uniform curriculum chooses among (0: such a run cannot use one).
    seed_pool: int = 0

    @property
    def weighted(self) -> bool:
        """Whether the curriculum chooses the tasks (uniform leaves the run's draw alone)."""
        return self.kind != UNIFORM


def check_curriculum(section: CurriculumConfig, where: str = "curriculum") -> list[str]:
    """The problems with `section`'s own values, each naming its key (empty: none); the kind,
    temperature and seed_pool are checked with the config's other choices and signs."""
    problems = []
    if not math.isfinite(section.success_reward):
        problems.append(f"{where}.success_reward: must be a finite number")
    for key in ("fast_rate", "slow_rate"):
        value = getattr(section, key)
        if not 0.0 < value <= 1.0:
            problems.append(f"{where}.{key}: must be above 0 and at most 1, got {value}")
    if section.kind == "learning_progress" and section.slow_rate >= section.fast_rate:
        problems.append(
            f"{where}.slow_rate: learning progress is the gap between a fast and a slow "
            f"average of success, so slow_rate must be below fast_rate ({section.fast_rate}), "
            f"got {section.slow_rate}"
        )
    if not 0.0 <= section.staleness_mix <= 1.0:
        problems.append(
            f"{where}.staleness_mix: must be between 0 and 1, got {section.staleness_mix}"
        )
    if not 0.0 < section.uniform_mix <= 1.0:
        problems.append(
            f"{where}.uniform_mix: must be above 0 (no task may be written off) and at most 1, "
            f"got {section.uniform_mix}"
        )
    return problems
