"""Runs setup stages one after another under a rich progress display, timing each.

While a stage runs, a spinner line says what it is doing (and, for a stage that works through
items, how many are done); when it ends, one line stays: the stage, what it found or did, and
the seconds it took. On a console that is not a terminal (a CI log) only those lines appear.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from rllm_envs.sandbox.docker_images import BuildError
from rllm_envs.setup.base import SetupRun, Stage, StageFailed

# A log (not a terminal) gets lines this wide, so a stage's line or a table row stays whole.
LOG_WIDTH = 120


def make_console() -> Console:
    """The console setup and doctor write to: stdout, as wide as a log line where it is not a
    terminal (rich would fold at 80 columns)."""
    console = Console()
    return console if console.is_terminal else Console(width=max(console.width, LOG_WIDTH))


@dataclass(frozen=True)
class StageResult:
    name: str
    outcome: str
    seconds: float


@dataclass
class RichStageProgress:
    """A :class:`~rllm_envs.setup.base.StageProgress` drawn as one task of a rich Progress."""

    progress: Progress
    task: Any  # the rich TaskID
    title: str
    done: int = 0
    total: int = 0

    def note(self, text: str) -> None:
        self.progress.update(self.task, description=escape(f"{self.title}: {text}"))

    def items(self, total: int) -> None:
        self.done, self.total = 0, total
        self.progress.update(self.task, total=total, completed=0, count=f"0/{total}")

    def advance(self, text: str = "") -> None:
        self.done += 1
        self.progress.update(self.task, advance=1, count=f"{self.done}/{self.total}")
        if text:
            self.note(text)


def _progress(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,  # only the finished stages' lines stay
        disable=not console.is_terminal,  # a log gets the finished lines only
    )


def run_stages(stages: Iterable[Stage], run: SetupRun, console: Console) -> list[StageResult]:
    """Run `stages` in order; a stage's SetupError or StageFailed stops the run (after a line
    saying which stage failed), a failed image build becomes a StageFailed."""
    results = []
    with _progress(console) as progress:
        for stage in stages:
            task = progress.add_task(escape(stage.title), total=None, count="")
            started = time.monotonic()
            try:
                outcome = stage.run(run, RichStageProgress(progress, task, stage.title))
            except BaseException as error:
                progress.remove_task(task)
                seconds = time.monotonic() - started
                console.print(
                    f"[red]✗[/] {escape(stage.title)} [dim]({seconds:.1f} s)[/]", soft_wrap=True
                )
                if isinstance(error, BuildError):
                    raise StageFailed(str(error)) from error
                raise
            progress.remove_task(task)
            seconds = time.monotonic() - started
            console.print(
                f"[green]✓[/] {escape(stage.title)}: {escape(outcome)} [dim]({seconds:.1f} s)[/]",
                soft_wrap=True,
            )
            results.append(StageResult(stage.name, outcome, seconds))
    return results
