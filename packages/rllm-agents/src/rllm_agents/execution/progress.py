"""Progress of a run's episodes with the live mean reward: a rich bar on a terminal, and where
stderr is a pipe or a file (a CI log, ``| tee``), a plain line every :data:`LINE_INTERVAL_S`
seconds and one at the end, so a long run is never silent until it finishes."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

LINE_INTERVAL_S = 30.0


def elapsed_text(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class RewardProgress:
    """`enabled`: True a bar, False nothing, None a bar on a terminal and lines elsewhere."""

    def __init__(
        self,
        total: int,
        description: str,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        line_interval_s: float = LINE_INTERVAL_S,
    ) -> None:
        self.stream = stream or sys.stderr
        terminal = self.stream.isatty()
        self.enabled = terminal if enabled is None else enabled
        self.lines = enabled is None and not terminal
        self.total, self.description = total, description
        self.line_interval_s = line_interval_s
        self._rewards: list[float] = []
        self._progress: Any = None
        self._started = self._last_line = time.monotonic()
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
        if self.lines and self._rewards:
            self._line()  # where the run ended, also when it stopped early

    def advance(self, reward: float) -> None:
        self._rewards.append(reward)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, mean_reward=f"{self._mean():.3f}")
        elif self.lines and time.monotonic() - self._last_line >= self.line_interval_s:
            self._line()

    def _mean(self) -> float:
        return sum(self._rewards) / len(self._rewards)

    def _line(self) -> None:
        now = time.monotonic()
        self._last_line = now
        print(
            f"{self.description}: {len(self._rewards)}/{self.total} episodes, "
            f"mean reward {self._mean():.3f}, {elapsed_text(now - self._started)}",
            file=self.stream,
            flush=True,
        )
