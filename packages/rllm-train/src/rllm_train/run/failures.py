"""When failed episodes stop a run: ``trainer.max_failure_rate``, one rule for both backends.

An episode *failed* when it says nothing about the policy: the env's infrastructure failed
(``failure``: the sandbox did not boot, the grader crashed), or the episode errored (an agent
program crashed or printed no answer, the model server died). A zero reward is not a failure:
it is what the policy earned. A step whose failed share is above the limit stops the run with
:class:`TooManyFailedEpisodes`, whose message is one line: a run that only learns from fake
zeros must not look like one that works. The native trainer checks each step's episodes; verl's
agent-loop manager (:mod:`rllm_train.verl.failure_check`) checks each step's batch with the
same function.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


class RunStopped(RuntimeError):
    """The run cannot go on, for a reason said in one line (``rllm-train: stopped: ...``)."""


class TooManyFailedEpisodes(RunStopped):
    """A step's failed episodes were above ``trainer.max_failure_rate`` (a one-line message)."""


@dataclass(frozen=True)
class StepFailures:
    """A step's failed episodes: how many of how many, and by kind."""

    failed: int
    total: int
    kinds: tuple[tuple[str, int], ...] = ()

    @property
    def rate(self) -> float:
        return self.failed / self.total if self.total else 0.0


def failure_kind(failure: str | None, error: str | None) -> str | None:
    """What an episode's failure is called (None: it did not fail): the env's failure kind, or
    the kind an error names first (``"crashed: exit status 3"``: crashed), else ``error``."""
    if failure:
        return str(failure)
    if error:
        kind, sep, _ = str(error).partition(":")
        return kind if sep and kind and " " not in kind else "error"
    return None


def step_failures(outcomes: Iterable[tuple[str | None, str | None]]) -> StepFailures:
    """The failures among (failure, error) pairs, one per episode."""
    kinds = [failure_kind(failure, error) for failure, error in outcomes]
    counted = Counter(kind for kind in kinds if kind is not None)
    return StepFailures(sum(counted.values()), len(kinds), tuple(counted.most_common()))


def check_failure_rate(failures: StepFailures, max_rate: float, step: int) -> None:
    """Raise :class:`TooManyFailedEpisodes` when `failures` exceed `max_rate` (step 1-based)."""
    if failures.rate <= max_rate:
        return
    kinds = ", ".join(f"{kind} {count}" for kind, count in failures.kinds[:3])
    raise TooManyFailedEpisodes(
        f"step {step}: {failures.failed} of {failures.total} episodes failed ({kinds}), more "
        f"than trainer.max_failure_rate={max_rate:g} allows; the episodes say nothing about the "
        "policy (see the run's episodes, or rllm-eval on the same env and agent), raise "
        "trainer.max_failure_rate to go on anyway"
    )
