"""What a run writes, on either backend: ``config.yaml``, ``metrics.jsonl`` (one row per step,
the shared metrics under the same names), TensorBoard, ``reward_curve.png`` and
``summary.json``. The native trainer writes them as it goes; the verl backend rebuilds the
metrics from verl's own logs (:mod:`rllm_train.verl.metrics_bridge`) and writes the rest here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rllm_agents.run_folder import append_durable, write_atomic
from rllm_envs.core.json_lines import whole_objects

METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "reward_curve.png"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
# What a run leaves in its folder: any of them means the folder holds a run (--resume).
RUN_MARKERS = ("checkpoints/latest", METRICS_FILE, CONFIG_FILE)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of `path`. A last line cut short by a killed run is left out (its step plays
    again, or its checkpoint gives the row back: see reconcile); any other damaged line is a
    DamagedLineError naming it, since every row after it would be lost with it."""
    if not path.is_file():
        return []
    return [row for _, row in whole_objects(path, skip_cut_short=True)]


def reconcile(
    rows: list[dict[str, Any]],
    checkpoint_step: int,
    checkpoint_rows: Iterable[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The rows a run resumed from `checkpoint_step` keeps: each step up to the checkpoint's
    once (the last written wins), none past it (those steps run again).

    `checkpoint_rows`, the rows the checkpoint itself keeps, give back any row of those steps
    that the log lacks (a line cut short or moved aside by --repair): a step whose checkpoint
    exists never plays again, so nothing else could give its row back. A run without a
    checkpoint starts over, its validation before training (step 0) included.
    """
    if checkpoint_step == 0:
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for row in [*checkpoint_rows, *rows]:
        step = row.get("step", 0)
        if step <= checkpoint_step:
            by_step[step] = row
    return [by_step[step] for step in sorted(by_step)]


class MetricsLog:
    """One JSON line per step; on resume, lines past the checkpoint are dropped (they rerun).

    A row is durable (fsynced) when write() returns, and the trainer writes it before the
    step's checkpoint moves ``latest``: a kill between the two leaves a row past the
    checkpoint, which the resume drops and plays again, so no step is ever lost or doubled.
    The resume's rewrite goes through a temporary file and a rename: a kill during it leaves
    the old log whole.

    ``earlier_rows`` holds the rows kept from before the resume, so that what is reported at
    the end covers the whole run; `checkpoint_rows` (those the resumed checkpoint keeps) fill
    in any the log lost.
    """

    def __init__(
        self,
        output: Path,
        tensorboard: bool,
        resume_step: int,
        checkpoint_rows: Iterable[dict[str, Any]] = (),
    ) -> None:
        self.path = output / METRICS_FILE
        kept = reconcile(read_metrics(self.path), resume_step, checkpoint_rows)
        self.earlier_rows = kept
        if self.path.exists() or kept:
            text = "".join(json.dumps(row) + "\n" for row in kept)
            write_atomic(self.path, text, fault="resume_start")
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(
                log_dir=str(output / "tensorboard"), purge_step=resume_step + 1
            )

    def write(self, row: dict[str, Any]) -> None:
        append_durable(self.path, json.dumps(row) + "\n")
        if self.writer is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(key, value, row["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def step_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of training steps (a validation before the first step has no reward)."""
    return [row for row in rows if "reward_mean" in row]


def run_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The reward over the reported steps (all of the run's, resumes included)."""
    every_row = rows
    validated = [row for row in rows if "val/reward_mean" in row]
    rows = step_rows(rows)
    if not rows:
        return {}
    first, last = rows[0], rows[-1]
    summary = {
        "reported_steps": [first["step"], last["step"]],
        "reward_first": first["reward_mean"],
        "reward_last": last["reward_mean"],
        "reward_best": max(row["reward_mean"] for row in rows),
    }
    probed = [row for row in every_row if "sft/probe_loss" in row]
    if probed:  # fine-tuning: the loss on the chosen sequences, before and after
        summary["sft_probe_loss_first"] = probed[0]["sft/probe_loss"]
        summary["sft_probe_loss_last"] = probed[-1]["sft/probe_loss"]
        sizes = [row["sft/sequences"] for row in every_row if "sft/sequences" in row]
        summary["sft_sequences"] = sizes[0] if sizes else None
    if validated:  # held-out validation: before training (step 0) and after the last step
        summary["val_steps"] = [validated[0]["step"], validated[-1]["step"]]
        summary["val_reward_first"] = validated[0]["val/reward_mean"]
        summary["val_reward_last"] = validated[-1]["val/reward_mean"]
    return summary


def write_summary(
    output: Path, rows: list[dict[str, Any]], backend: str, config: dict[str, Any] | None
) -> dict[str, Any]:
    """``summary.json``: the backend, the steps trained, the reward over them, the config."""
    trained = step_rows(rows)
    summary = {
        "backend": backend,
        "steps": trained[-1]["step"] if trained else 0,
        **run_summary(rows),
        **({"config": config} if config is not None else {}),
    }
    write_atomic(output / SUMMARY_FILE, json.dumps(summary, indent=1))
    return summary


def write_step_episodes(
    output: Path,
    step: int,
    episodes: list,
    model_name: str,
    version: int,
    folder_name: str = "",
) -> Path:
    """``episodes/step_NNNN.jsonl``: a step's sampled episodes (``trainer.save_episodes``),
    stamped with the weights that played them (the model after `version` updates). Atomic, so
    a step replayed after a resume replaces its file instead of adding to it. `folder_name`
    puts them elsewhere: every validation's (a few dozen short episodes, so always kept) go to
    VALIDATION_EPISODES_FOLDER, with `step` = `version` - 1 (step_0000: before training)."""
    from rllm_agents.episodes.records import TRAIN_EPISODES_FOLDER, episodes_text

    for episode in episodes:
        episode.policy.update(name=model_name, version=f"step-{version}")
    folder = output / (folder_name or TRAIN_EPISODES_FOLDER)
    folder.mkdir(exist_ok=True)
    path = folder / f"step_{step + 1:04d}.jsonl"
    write_atomic(path, episodes_text(episodes))
    return path


def run_title(model: str, env_id: str, algorithm: str, where: str = "") -> str:
    """The reward curve's title: what trained on what, how."""
    return f"{model} on {env_id} ({algorithm}{', ' + where if where else ''})"


def sampling_label(what: str, temperature: float | None) -> str:
    """A curve's label with how its episodes were sampled (greedy at temperature 0)."""
    if temperature is None:
        return what
    return f"{what} (greedy)" if temperature == 0 else f"{what} (sampled, T={temperature:g})"


def plot_reward_curve(
    metrics_path: Path,
    png_path: Path,
    title: str = "",
    rates: dict[str, str] | None = None,
    temperatures: tuple[float | None, float | None] = (None, None),
) -> Path | None:
    """The run's :func:`reward_figure` as a PNG (None, and no file, before any row)."""
    every_row = read_metrics(metrics_path)
    if not every_row:
        return None
    figure = reward_figure(every_row, title, rates, temperatures)  # chooses the Agg backend
    from matplotlib import pyplot

    figure.savefig(png_path)
    pyplot.close(figure)
    return png_path


def plot_run_curve(output: Path, config: Any, rates: dict[str, str] | None = None) -> Path | None:
    """A native run's curve, titled and labelled from its config (a TrainConfig)."""
    return plot_reward_curve(
        output / METRICS_FILE,
        output / CURVE_FILE,
        title=run_title(config.model.name, config.env.id, config.algorithm.name),
        rates=rates,
        temperatures=(config.rollout.temperature, config.rollout.val_temperature),
    )


def reward_figure(
    every_row: list[dict[str, Any]],
    title: str = "",
    rates: dict[str, str] | None = None,
    temperatures: tuple[float | None, float | None] = (None, None),
) -> Any:
    """Mean training reward per step, and validation reward where measured.

    Validation is drawn as points only, at the steps it was measured (step 0: before the
    first update): a line between two of them would claim values nobody measured.
    ``temperatures`` (training, validation) go into the labels, since a greedy validation
    and a sampled training reward differ by more than learning. ``rates`` (metric -> label)
    that the metrics hold get a 0-1 panel of their own below, at the steps that have them.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    rows = step_rows(every_row)
    plotted = {
        key: label for key, label in (rates or {}).items() if any(key in row for row in every_row)
    }
    panels = 2 if plotted else 1
    figure, grid = pyplot.subplots(
        panels,
        1,
        figsize=(6, 3.5 * panels - 0.5 * (panels - 1)),
        dpi=110,
        sharex=True,
        squeeze=False,
    )
    axes = grid[0][0]
    train_temperature, val_temperature = temperatures
    axes.plot(
        [row["step"] for row in rows],
        [row["reward_mean"] for row in rows],
        marker="o",
        ms=3,
        label=sampling_label("train reward", train_temperature),
    )
    validated = [row for row in every_row if "val/reward_mean" in row]
    if validated:
        axes.plot(
            [row["step"] for row in validated],
            [row["val/reward_mean"] for row in validated],
            linestyle="none",
            marker="s",
            ms=6,
            label=sampling_label("validation reward", val_temperature),
        )
    axes.set_ylabel("mean reward")
    axes.set_title(title, fontsize=9)
    for key, label in plotted.items():
        panel = grid[1][0]
        had = [row for row in every_row if key in row]
        panel.plot(
            [row["step"] for row in had], [row[key] for row in had], marker="^", ms=4, label=label
        )
        panel.set_ylim(-0.02, 1.02)
        panel.set_ylabel("rate")
    for (panel,) in grid:
        panel.grid(alpha=0.3)
        panel.legend(fontsize=8)
    grid[-1][0].set_xlabel("step")
    figure.tight_layout()
    return figure


def progress_bar(total: int, completed: int, enabled: bool):
    """A rich progress bar (a no-op object when disabled)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("[bold]rllm-train"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        disable=not enabled,
    )
    task = progress.add_task("train", total=total, completed=completed, status="")
    return progress, task
