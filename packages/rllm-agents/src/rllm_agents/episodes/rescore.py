"""Re-score: grade stored episodes again, with no model, and set old and new side by side.

The grader (:mod:`rllm_agents.episodes.graders`) gives each episode a new
:class:`~rllm_agents.episodes.graders.Score`; the old one is what the episode recorded
(``Episode.reward``, ``Episode.is_correct``). A :class:`RescoreRow` disagrees when the
rewards differ (beyond float rounding) or both correctness values are known and differ. A
grader that raises on an episode (a grader or sandbox failure) gives a row with its error,
counted apart from disagreements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from rllm_agents.episodes.envs import NotReplayable, RecordedEnvs
from rllm_agents.episodes.graders import (
    ENV_GRADER,
    GRADERS,
    Grader,
    as_score,
    grader_for_env,
)
from rllm_agents.types import Episode


class UnknownGrader(ValueError):
    """A --grader that is neither a built-in name nor a loadable module:function."""


@dataclass(frozen=True)
class RescoreRow:
    episode_id: str
    task_key: str
    grader: str
    old_reward: float
    new_reward: float | None
    old_correct: bool | None
    new_correct: bool | None
    error: str | None = None

    @property
    def agrees(self) -> bool:
        if self.error is not None or self.new_reward is None:
            return False
        same_reward = math.isclose(self.old_reward, self.new_reward, rel_tol=1e-9, abs_tol=1e-9)
        known = self.old_correct is not None and self.new_correct is not None
        return same_reward and (not known or self.old_correct == self.new_correct)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "agrees": self.agrees}


@dataclass(frozen=True)
class RescoreSummary:
    grader: str
    episodes: int
    agree: int
    disagree: int
    errors: int
    old_mean_reward: float
    new_mean_reward: float | None

    @classmethod
    def of(cls, grader: str, rows: list[RescoreRow]) -> RescoreSummary:
        graded = [row for row in rows if row.error is None]
        return cls(
            grader=grader,
            episodes=len(rows),
            agree=sum(row.agrees for row in rows),
            disagree=sum(not row.agrees for row in graded),
            errors=len(rows) - len(graded),
            old_mean_reward=_mean([row.old_reward for row in rows]),
            new_mean_reward=_mean([row.new_reward for row in graded]) if graded else None,
        )


@dataclass
class GraderChoice:
    """What ``--grader`` names: a built-in grader, ``env`` (each episode's env's own) or a
    reward function. Built-in graders are made once per run (they may hold a verifier or a
    sandbox between episodes)."""

    name: str
    function: Callable[[Episode], Any] | None = None  # a module:function reward function
    _made: dict[str, Grader] = field(default_factory=dict)

    def for_episode(self, envs: RecordedEnvs, episode: Episode) -> tuple[str, Grader]:
        if self.function is not None:
            function = self.function
            return self.name, lambda episode: as_score(function(episode))
        name = self.name
        if name == ENV_GRADER:
            name = grader_for_env(episode.env.id if episode.env is not None else None)
        if name not in self._made:
            self._made[name] = GRADERS[name](envs)
        return name, self._made[name]


def resolve_grader(name: str) -> GraderChoice:
    """The grader `name` names, or UnknownGrader (before any episode is read)."""
    if name in GRADERS or name == ENV_GRADER:
        return GraderChoice(name)
    if ":" not in name:
        raise UnknownGrader(
            f"--grader {name!r}: not one of {', '.join([ENV_GRADER, *GRADERS])} and not of "
            "the form module:function"
        )
    from rllm_envs.core.loading import LoadError, load_attr

    try:
        function = load_attr(name, what="--grader")
    except LoadError as error:
        raise UnknownGrader(str(error)) from error
    if not callable(function):
        raise UnknownGrader(f"--grader: {name!r} is not callable")
    return GraderChoice(name, function)


def rescore(episodes: Iterable[Episode], grader: str) -> list[RescoreRow]:
    """One row per episode: its recorded score and `grader`'s."""
    choice = resolve_grader(grader)
    with RecordedEnvs() as envs:
        return [score_episode(episode, *choice.for_episode(envs, episode)) for episode in episodes]


def disagreements(rows: Iterable[RescoreRow]) -> list[RescoreRow]:
    return [row for row in rows if not row.agrees]


def score_episode(episode: Episode, name: str, grade: Grader) -> RescoreRow:
    """`episode`'s recorded score and `grade`'s (a failing grade: a row with its error)."""
    old = dict(
        episode_id=episode.id,
        task_key=str(episode.info.get("task_key", episode.id)),
        grader=name,
        old_reward=float(episode.reward),
        old_correct=episode.is_correct,
    )
    try:
        score = grade(episode)
    except NotReplayable as reason:
        return RescoreRow(**old, new_reward=None, new_correct=None, error=str(reason))
    except Exception as error:  # noqa: BLE001 - a failing grade is reported, the rest go on
        text = f"{type(error).__name__}: {error}"
        return RescoreRow(**old, new_reward=None, new_correct=None, error=text)
    return RescoreRow(**old, new_reward=score.reward, new_correct=score.is_correct)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
