"""A progress bar with the live mean reward (rich; silent when stderr is not a terminal)."""

from __future__ import annotations

import sys
from typing import Any


class RewardProgress:
    def __init__(self, total: int, description: str, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._rewards: list[float] = []
        self._progress: Any = None
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("mean reward {task.fields[mean_reward]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            self._task = self._progress.add_task(description, total=total, mean_reward="-")

    def __enter__(self) -> RewardProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def advance(self, reward: float) -> None:
        self._rewards.append(reward)
        if self._progress is not None:
            mean = sum(self._rewards) / len(self._rewards)
            self._progress.update(self._task, advance=1, mean_reward=f"{mean:.3f}")
