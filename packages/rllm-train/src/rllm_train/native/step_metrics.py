"""What a native step reports: its ``metrics.jsonl`` row, and validation's metrics.

How episodes are counted depends on who plays them, once, in a :class:`Scoring`: a single
agent's reward is its episode's; a game's is that of the seats the trained model played, with
each seat's, role's and policy's figures beside it (:func:`seat_metrics`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rllm_agents.types import Episode

from rllm_train.native.batch import TrainSequence, model_tokens
from rllm_train.native.judging import judge_metrics
from rllm_train.native.sampler import Rollout
from rllm_train.run.failures import StepFailures


@dataclass(frozen=True)
class Scoring:
    """How a run's episodes are scored and what is reported beside the reward."""

    rewards: Callable[[list[Episode]], list[float]]
    extra: Callable[[list[Episode], str], dict[str, float]] = lambda episodes, prefix: {}
    plotted_rates: dict[str, str] = field(default_factory=dict)  # metric -> label, 0-1 panel


def agent_rewards(episodes: list[Episode]) -> list[float]:
    return [episode.reward for episode in episodes if episode.failure is None]


AGENT_SCORING = Scoring(agent_rewards)


def game_scoring() -> Scoring:
    """A multi-agent game's: the trained seats' rewards, and every seat's figures."""
    from rllm_train.native.multiagent_sampler import TRAINED_SUCCESS, seat_metrics, trained_rewards

    return Scoring(
        trained_rewards,
        seat_metrics,
        {
            TRAINED_SUCCESS: "train success rate (trained seats)",
            f"val/{TRAINED_SUCCESS}": "validation success rate (trained seats)",
        },
    )


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def episode_metrics(
    episodes: list[Episode], scoring: Scoring, failures: StepFailures
) -> dict[str, Any]:
    """What a step's episodes earned, and how many failed (not trained on)."""
    rewards = scoring.rewards(episodes)
    correct = [float(e.is_correct) for e in episodes if e.is_correct is not None]
    generated = [model_tokens(e) for e in episodes if e.trajectories]
    split = [
        t for e in episodes for t in e.trajectories if t.info.get("prefix_consistent") is False
    ]
    return {
        "reward_mean": _mean(rewards),
        "reward_std": float(np.std(rewards)) if rewards else 0.0,
        "accuracy": _mean(correct) if correct else None,
        "episodes": len(episodes),
        "failures": sum(e.failure is not None for e in episodes),
        # Ended in ERROR or TIMEOUT (a crashed program, the model server): not trained on.
        "errors": sum(e.error is not None for e in episodes),
        # Either of the two: what trainer.max_failure_rate counts (rllm_train.run.failures).
        "failed_episodes": failures.failed,
        "response_tokens_mean": _mean(generated),
        "prefix_breaks": len(split),  # trajectories of several sequences (batch.py)
        # Context compactions (rollout.compaction), and the episodes that had one.
        "compactions": int(sum(e.metrics.get("compactions", 0.0) for e in episodes)),
        "compacted_episodes": sum(bool(e.metrics.get("compactions")) for e in episodes),
        "task_ids": sorted({str(e.info.get("task_key")) for e in episodes}),
    }


@dataclass(frozen=True)
class StepTimes:
    started: float  # perf_counter() when the step began
    rollout_s: float
    update_s: float


def step_row(
    step: int,
    rollout: Rollout,
    sequences: list[TrainSequence],
    losses: dict[str, float],
    failures: StepFailures,
    scoring: Scoring,
    times: StepTimes,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The row a training step writes to ``metrics.jsonl`` (`step` 0-based)."""
    episodes = rollout.episodes
    return {
        "step": step + 1,
        **episode_metrics(episodes, scoring, failures),
        "sequences": len(sequences),
        **losses,
        "time/rollout_s": times.rollout_s,
        "time/generate_s": rollout.generate_seconds,
        "time/env_s": rollout.env_seconds,
        **judge_metrics(rollout),
        "time/update_s": times.update_s,
        "time/step_s": time.perf_counter() - times.started,
        **extra,
        **scoring.extra(episodes, ""),
    }


def progress_status(row: dict[str, Any]) -> str:
    """The progress bar's line: the reward, the loss and the failed episodes of the step."""
    return (
        f"reward {row['reward_mean']:.2f}  loss {row.get('loss', 0.0):.3f}  "
        f"failed {row.get('failed_episodes', 0)}/{row.get('episodes', 0)}"
    )
