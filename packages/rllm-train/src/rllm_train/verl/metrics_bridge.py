"""A verl run's metrics as the native backend writes them: ``metrics.jsonl``, the reward curve
and ``summary.json`` in the run folder.

verl's own file logger writes one JSON line per step (``{"step": N, "data": {...}}``) to a new
file per attempt (a resume is a new attempt; see :func:`rllm_train.verl.cpu.runner.verl_metrics_file`).
A line that names its training step (``training/global_step``) belongs to that step: verl's
fully-async trainer logs a step's training metrics under the next weights version.
The run's ``metrics.jsonl`` is rebuilt from all attempts, a later attempt's row replacing an
earlier one of the same step, and written through a temporary file. Each row carries verl's
metrics under their own names plus the native backend's names for the shared ones, so the
same plots, summaries and comparisons read both backends.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rllm_envs.core.json_lines import whole_objects

from rllm_train.run import reporting

ATTEMPTS_FOLDER = "verl_metrics"
# native name -> verl's name(s) for the same figure (the first one present is taken).
SHARED_NAMES: dict[str, str | tuple[str, ...]] = {
    "reward_mean": "critic/score/mean",
    "reward_max": "critic/score/max",
    "reward_min": "critic/score/min",
    "loss": "actor/pg_loss",
    "grad_norm": "actor/grad_norm",
    "kl_loss": "actor/kl_loss",
    "entropy": "actor/entropy",
    "response_tokens_mean": "response_length/mean",
    "num_turns_mean": "num_turns/mean",
    # verl compares probabilities here (|p_rollout - p_trainer| per token), not log-probs.
    "prob_gap_mean": "training/rollout_probs_diff_mean",
    "prob_gap_max": "training/rollout_probs_diff_max",
    "time/step_s": "timing_s/step",
    "time/rollout_s": "timing_s/gen",
    "time/update_s": "timing_s/update_actor",
    # The fully-async trainer times its weight sync under its own (doubled) prefix.
    "time/weight_sync_s": ("timing_s/update_weights", "timing_s/timing_s/param_sync"),
    "time/checkpoint_s": "timing_s/save_checkpoint",
}
# The agent-loop manager's per-replica figures reach verl's log among its timings.
REPLICA_PREFIX = "timing_s/rollout/replica_"
VALIDATION_PREFIX = "val-core/"  # verl: val-core/<data source>/reward/mean@N
TRAINING_STEP = "training/global_step"


def _number(value: Any) -> float | int | None:
    """A JSON number for a metric (verl logs numpy scalars), or None for anything else."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None


def native_row(step: int, data: Mapping[str, Any]) -> dict[str, Any]:
    """One step's row: verl's numeric metrics, plus their native names."""
    metrics = {key: number for key, value in data.items() if (number := _number(value)) is not None}
    row: dict[str, Any] = {"step": step}
    for native, verl_names in SHARED_NAMES.items():
        names = (verl_names,) if isinstance(verl_names, str) else verl_names
        present = [name for name in names if name in metrics]
        if present:
            row[native] = metrics[present[0]]
    for key, value in metrics.items():
        if key.startswith(REPLICA_PREFIX):  # counts and versions, not timings
            row[key.removeprefix("timing_s/")] = value
    validation = [
        value
        for key, value in metrics.items()
        if key.startswith(VALIDATION_PREFIX) and "/reward/mean@" in key
    ]
    if validation:
        row["val/reward_mean"] = sum(validation) / len(validation)
    # verl's own names for the rest; the replica figures only under theirs (set above).
    row.update(
        {
            key: value
            for key, value in metrics.items()
            if key not in row and not key.startswith(REPLICA_PREFIX)
        }
    )
    return row


def record_step(record: Mapping[str, Any]) -> int:
    """The training step a logged line belongs to (see the module docstring)."""
    named = _number(record["data"].get(TRAINING_STEP))
    return int(named) if named is not None else int(record["step"])


def attempt_files(folder: Path) -> list[Path]:
    """verl's logs in `folder`, one per attempt, the first attempt's first."""
    return sorted(folder.glob("attempt-*.jsonl"))


def read_attempts(folder: Path) -> dict[int, dict[str, Any]]:
    """Step -> verl's metrics, across attempts in order (a later one replaces an earlier one)."""
    steps: dict[int, dict[str, Any]] = {}
    for attempt in attempt_files(folder):
        this_attempt: dict[int, dict[str, Any]] = {}
        # A killed attempt's last line may be cut short; any other damaged line stops the
        # rebuild (rllm-train --resume --repair moves it aside) instead of ending the attempt.
        for _, record in whole_objects(attempt, skip_cut_short=True):
            # verl logs a step's training metrics and its validation in separate calls.
            this_attempt.setdefault(record_step(record), {}).update(record["data"])
        steps.update(this_attempt)
    return steps


def write_rows(rows: Iterable[dict[str, Any]], path: Path) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with temporary.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)


def publish(
    run_root: Path,
    title: str,
    config: Mapping[str, Any] | None = None,
    temperatures: tuple[float | None, float | None] = (None, None),
) -> list[dict]:
    """Rebuild ``metrics.jsonl``, ``reward_curve.png`` and ``summary.json`` from verl's logs."""
    steps = read_attempts(run_root / ATTEMPTS_FOLDER)
    rows = [native_row(step, steps[step]) for step in sorted(steps)]
    metrics_path = run_root / reporting.METRICS_FILE
    write_rows(rows, metrics_path)
    if rows:
        reporting.plot_reward_curve(
            metrics_path, run_root / reporting.CURVE_FILE, title=title, temperatures=temperatures
        )
    reporting.write_summary(run_root, rows, "verl", dict(config) if config is not None else None)
    return rows
