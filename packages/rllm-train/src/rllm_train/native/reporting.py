"""Where training metrics go: ``metrics.jsonl``, TensorBoard and a reward-curve PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "reward_curve.png"


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by a killed run ends the readable log
    return rows


class MetricsLog:
    """One JSON line per step; on resume, lines past the checkpoint are dropped (they rerun).

    ``earlier_rows`` holds the rows kept from before the resume, so that what is reported at
    the end covers the whole run.
    """

    def __init__(self, output: Path, tensorboard: bool, resume_step: int) -> None:
        self.path = output / METRICS_FILE
        kept = [row for row in read_metrics(self.path) if row.get("step", 0) <= resume_step]
        self.earlier_rows = kept
        self.path.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(
                log_dir=str(output / "tensorboard"), purge_step=resume_step + 1
            )

    def write(self, row: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        if self.writer is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(key, value, row["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def run_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The reward over the reported steps (all of the run's, resumes included)."""
    if not rows:
        return {}
    first, last = rows[0], rows[-1]
    return {
        "reported_steps": [first["step"], last["step"]],
        "reward_first": first["reward_mean"],
        "reward_last": last["reward_mean"],
        "reward_best": max(row["reward_mean"] for row in rows),
    }


def plot_reward_curve(metrics_path: Path, png_path: Path, title: str = "") -> Path | None:
    """Mean training reward per step (and validation reward where measured) as a PNG."""
    rows = read_metrics(metrics_path)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6, 3.5), dpi=110)
    steps = [row["step"] for row in rows]
    axes.plot(steps, [row["reward_mean"] for row in rows], marker="o", ms=3, label="train reward")
    validated = [row for row in rows if "val/reward_mean" in row]
    if validated:
        axes.plot(
            [row["step"] for row in validated],
            [row["val/reward_mean"] for row in validated],
            marker="s",
            ms=4,
            label="validation reward",
        )
    axes.set_xlabel("step")
    axes.set_ylabel("mean reward")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png_path)
    pyplot.close(figure)
    return png_path


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
