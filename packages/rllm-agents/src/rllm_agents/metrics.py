"""Evaluation metrics: unbiased pass@k, and summaries of a list of episodes."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from rllm_agents.types import Episode, TerminationReason


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from `n` samples of which `c` are correct (Chen et al., 2021).

    The chance that at least one of `k` samples drawn without replacement from the `n` is
    correct: ``1 - C(n - c, k) / C(n, k)``, computed as a product to stay exact for large n.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def episode_correct(episode: Episode) -> bool:
    """Correctness: the env's ``is_correct`` when it reports one, else a positive reward."""
    if episode.is_correct is not None:
        return bool(episode.is_correct)
    return episode.reward > 0


def group_key(episode: Episode) -> str:
    """Episodes of the same task share a key (``info["task_key"]``, set by the engines)."""
    return str(episode.info.get("task_key", episode.id))


def task_name(episode: Episode) -> str:
    """The task a recorded episode played: the engines' task key, else its task row's id (an
    episode written by other code), else the episode's own id. What rllm-view shows and
    ``--algorithm sft`` groups by."""
    task = episode.task if isinstance(episode.task, dict) else {}
    return str(episode.info.get("task_key") or task.get("task_id") or episode.id)


def pass_at_k_by_task(episodes: Iterable[Episode], k: int) -> float:
    """Mean over tasks of unbiased pass@k; tasks with fewer than k samples are skipped."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for episode in episodes:
        groups[group_key(episode)].append(episode_correct(episode))
    scores = [pass_at_k(len(g), sum(g), k) for g in groups.values() if len(g) >= k]
    return sum(scores) / len(scores) if scores else 0.0


def compute_pass_at_k(results: Iterable[Episode], k: int | None = None) -> dict[str, float]:
    """pass@k of per-episode results (``execute_tasks`` over a ``TaskSet.repeat(n)``).

    Episodes are grouped by task; with n samples of every task, pass@1, 2, 4, ... n are
    reported (or only pass@`k`), each the unbiased estimate averaged over tasks, beside the
    number of tasks and samples per task.
    """
    episodes = list(results)
    groups: Counter[str] = Counter(group_key(episode) for episode in episodes)
    samples = min(groups.values()) if groups else 0
    ks = [k] if k is not None else pass_ks(samples) if samples else []
    scores = {f"pass@{each}": pass_at_k_by_task(episodes, each) for each in ks}
    return {"tasks": float(len(groups)), "samples_per_task": float(samples), **scores}


def pass_ks(n: int) -> list[int]:
    """The k values worth reporting for n samples per task: 1, 2, 4, ... and n."""
    ks = [1]
    while ks[-1] * 2 < n:
        ks.append(ks[-1] * 2)
    if n > 1:
        ks.append(n)
    return ks


def infrastructure_failure(episode: Episode) -> bool:
    """Whether the episode was cut short by something other than the agent: the model server
    or the code around the env raised (``error``), or the env's own infrastructure failed
    (``failure``). Such an episode says nothing of the model, so it is not scored."""
    return episode.termination_reason == TerminationReason.ERROR or bool(episode.failure)


# How an episode that was not graded correct ended, by its termination reason.
_ENDINGS = {
    TerminationReason.ENV_DONE: "wrong",
    TerminationReason.ENV_TRUNCATED: "turn limit (the env's)",
    TerminationReason.MAX_TURNS: "turn limit (--max-turns)",
    TerminationReason.PROMPT_TOO_LONG: "prompt too long",
    TerminationReason.RESPONSE_TOO_LONG: "response budget used up",
    TerminationReason.TIMEOUT: "timeout",
    TerminationReason.ERROR: "error",
}


def last_step_info(episode: Episode) -> dict[str, Any]:
    steps = [step for trajectory in episode.trajectories for step in trajectory.steps]
    return steps[-1].info if steps and isinstance(steps[-1].info, dict) else {}


def outcome_of(episode: Episode) -> str:
    """Why an episode scored what it did, in words: the env's failure kind, the env's own
    grade where it gives one (``grade``: Math's ``no_boxed_answer``, ``wrong``, ...), else
    ``correct`` or how it ended (``wrong``, a turn limit, ``timeout``, ...)."""
    if episode.failure:
        return f"env failure: {episode.failure}"
    if episode.error or episode.termination_reason in (
        TerminationReason.ERROR,
        TerminationReason.TIMEOUT,
    ):
        return _ENDINGS.get(episode.termination_reason, "error")
    grade = last_step_info(episode).get("grade")
    if isinstance(grade, str) and grade:
        return grade
    if episode_correct(episode):
        return "correct"
    return _ENDINGS.get(episode.termination_reason, "unknown")


def invalid_action_share(episodes: Iterable[Episode]) -> float | None:
    """The share of steps whose env said the action was not valid (``action_valid``), over
    the steps that say either way; None where no env says."""
    said = [
        bool(step.info["action_valid"])
        for episode in episodes
        for trajectory in episode.trajectories
        for step in trajectory.steps
        if isinstance(step.info, dict) and "action_valid" in step.info
    ]
    return said.count(False) / len(said) if said else None


def summarize_episodes(episodes: list[Episode], samples_per_task: int = 1) -> dict[str, Any]:
    """Reward, pass@k, termination reasons, token counts and timings of a run.

    Scores (mean reward, accuracy, pass@k) cover the episodes that ran to an end
    (``scored_episodes``); infrastructure failures are counted apart (``infra_failures``)
    instead of as fake zeros.
    """
    every = episodes
    episodes = [episode for episode in every if not infrastructure_failure(episode)]
    count = len(episodes)
    totals = Counter()
    for episode in every:  # tokens and time spent count whatever became of the episode
        totals.update({key: value for key, value in episode.metrics.items() if key in _SUMMED})
    reasons = Counter(
        episode.termination_reason.value if episode.termination_reason else "unknown"
        for episode in every
    )
    summary: dict[str, Any] = {
        "episodes": len(every),
        "scored_episodes": count,
        "infra_failures": len(every) - count,
        "tasks": len({group_key(episode) for episode in every}),
        "samples_per_task": samples_per_task,
        "mean_reward": sum(episode.reward for episode in episodes) / count if count else 0.0,
        "accuracy": sum(map(episode_correct, episodes)) / count if count else 0.0,
        "termination_reasons": dict(sorted(reasons.items())),
        "env_failures": sum(1 for episode in every if episode.failure),
        "errors": reasons.get("error", 0) + reasons.get("timeout", 0),
        # Why they scored what they did, most common first.
        "outcomes": dict(Counter(map(outcome_of, every)).most_common()),
        "invalid_action_share": invalid_action_share(every),
    }
    for k in pass_ks(samples_per_task):
        summary[f"pass@{k}"] = pass_at_k_by_task(episodes, k)
    summary.update({key: float(totals[key]) for key in _SUMMED})
    return summary


# Per-episode metrics that add up over a run.
_SUMMED = ("llm_time", "queue_time", "env_time", "prompt_tokens", "completion_tokens", "turns")
