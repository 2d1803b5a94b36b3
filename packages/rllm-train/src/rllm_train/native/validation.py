"""Validation of the native trainer: the policy on the run's validation tasks, no update.

Greedy (``rollout.val_temperature``) episodes on the validation tasks - the first
``trainer.val_tasks`` held-out rows when the run has them, else seeds of a stream of their own
(:func:`rllm_train.run.tasks.validation_draws`) - judged like the training episodes, and with
``rollout.val_n > 1`` also ``val_n`` samples of each at the sampling temperature for pass@k.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rllm_agents.episodes.records import VALIDATION_EPISODES_FOLDER
from rllm_agents.metrics import compute_pass_at_k

from rllm_train.config import TrainConfig
from rllm_train.datasets import RunData
from rllm_train.native.episode_sources import rows_given
from rllm_train.native.judging import judge_metrics
from rllm_train.native.sampler import EpisodeSampler, Rollout
from rllm_train.native.step_metrics import Scoring
from rllm_train.run import reporting
from rllm_train.run.tasks import VALIDATION_STREAM, step_sampling_seed, validation_draws


def validate(
    sampler: EpisodeSampler,
    config: TrainConfig,
    data: RunData,
    *,
    version: int,
    scoring: Scoring,
    judge: Callable[[Rollout, list[str], str], Rollout],
    pass_at_k: bool,
    output: Path | None = None,
) -> dict[str, float]:
    """The ``val/`` metrics of the weights after `version` updates; with `output`, the greedy
    episodes go to its ``validation/step_NNNN.jsonl`` (NNNN = `version`)."""
    started = time.perf_counter()
    trainer, rollout = config.trainer, config.rollout
    draws = validation_draws(trainer.seed, trainer.val_tasks, data)
    seeds = [draw.seed for draw in draws]
    rows = [draw.row for draw in draws] if data.val is not None else None
    sampling_seed = step_sampling_seed(trainer.seed, VALIDATION_STREAM + version)
    played = sampler.sample(seeds, rollout.val_temperature, sampling_seed, **rows_given(rows))
    played = judge(played, [str(seed) for seed in seeds], f"val_{version:04d}")
    episodes = played.episodes
    if output is not None:
        reporting.write_step_episodes(
            output, version - 1, episodes, config.model.name, version,
            folder_name=VALIDATION_EPISODES_FOLDER,
        )  # fmt: skip
    rewards = scoring.rewards(episodes)
    metrics = {
        "val/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
        **judge_metrics(played, "val/"),
        **scoring.extra(episodes, "val/"),
    }
    correct = [float(e.is_correct) for e in episodes if e.is_correct is not None]
    if correct:
        metrics["val/accuracy"] = float(np.mean(correct))
    if rollout.val_n > 1 and pass_at_k:
        metrics.update(_pass_at_k(sampler, config, seeds, rows, sampling_seed))
    metrics["time/validation_s"] = time.perf_counter() - started
    return metrics


def _pass_at_k(
    sampler: EpisodeSampler,
    config: TrainConfig,
    seeds: list[int],
    rows: list[dict[str, Any]] | None,
    sampling_seed: int,
) -> dict[str, float]:
    n = config.rollout.val_n
    repeated_seeds = [seed for seed in seeds for _ in range(n)]
    repeated_rows = [row for row in rows for _ in range(n)] if rows is not None else None
    episodes = sampler.sample(
        repeated_seeds, config.rollout.temperature, sampling_seed + 1, **rows_given(repeated_rows)
    ).episodes
    scores = compute_pass_at_k(episodes)
    return {f"val/{key}": value for key, value in scores.items() if key.startswith("pass@")}
