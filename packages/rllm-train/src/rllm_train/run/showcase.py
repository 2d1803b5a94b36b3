"""What a finished run shows a person: held-out episodes before and after training, side by side.

Validation writes its greedy episodes to ``OUTPUT/validation/step_NNNN.jsonl`` (``step_0000``:
the untrained model). This module pairs the first and the last validation's episodes by task
and prints a few of them next to each other - the tasks where training changed the reward
first - so the reader sees what the agent now does differently, not only a number.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_agents.episodes.records import VALIDATION_EPISODES_FOLDER

# Characters of one reply shown in a cell: enough for a short answer and the env's verdict.
REPLY_CHARS = 40


@dataclass(frozen=True)
class Comparison:
    """One held-out task played before and after training."""

    task: str
    opening: str  # the task's first observation
    before: Any  # the Episode of the first validation
    after: Any  # the Episode of the last one

    @property
    def gain(self) -> float:
        return _reward(self.after) - _reward(self.before)


def validation_files(output: Path) -> list[Path]:
    """The run's validation episode files, first validation first."""
    folder = Path(output) / VALIDATION_EPISODES_FOLDER
    return sorted(folder.glob("step_*.jsonl")) if folder.is_dir() else []


def comparisons(before: list[Any], after: list[Any]) -> list[Comparison]:
    """The tasks both validations played, most improved first (then most worsened)."""
    after_by_task = {_task(episode): episode for episode in after}
    paired = [
        Comparison(_task(episode), _opening(episode), episode, after_by_task[_task(episode)])
        for episode in before
        if _task(episode) in after_by_task
    ]
    return sorted(paired, key=lambda pair: (-pair.gain, pair.task))


def turns_text(episode: Any) -> str:
    """The agent's replies, one line per turn, each with the reward the env gave it."""
    lines = []
    for step in _steps(episode):
        reply = " ".join(str(step.action if step.action is not None else "").split())
        if len(reply) > REPLY_CHARS:
            reply = reply[: REPLY_CHARS - 1] + "…"
        mark = "✓" if step.reward > 0 else "✗"
        lines.append(f"{mark} {reply!r}")
    lines.append(f"reward {_reward(episode):.2f}")
    return "\n".join(lines)


def show_before_after(output: Path, examples: int = 3, console: Any = None) -> bool:
    """Print `examples` held-out tasks before and after training; False when the run has not
    validated twice (nothing to compare)."""
    from rich.console import Console
    from rich.table import Table
    from rllm_agents.episodes import read_episodes

    files = validation_files(output)
    if len(files) < 2:
        return False
    first, last = files[0], files[-1]
    pairs = comparisons(list(read_episodes(first)), list(read_episodes(last)))[:examples]
    if not pairs:
        return False
    table = Table(title=f"Held-out tasks, greedy: {first.stem} (before) and {last.stem} (after)")
    table.add_column("task")
    table.add_column("before training")
    table.add_column("after training")
    for pair in pairs:
        task = f"{pair.task}\n{pair.opening}" if pair.opening else pair.task
        table.add_row(task, turns_text(pair.before), turns_text(pair.after))
    (console or Console()).print(table)
    return True


def _steps(episode: Any) -> list[Any]:
    return [step for trajectory in episode.trajectories for step in trajectory.steps]


def _reward(episode: Any) -> float:
    return float(sum(step.reward for step in _steps(episode)))


def _task(episode: Any) -> str:
    return str(episode.info.get("task_key") or episode.id.rpartition(":")[0] or episode.id)


def _opening(episode: Any) -> str:
    steps = _steps(episode)
    text = str(steps[0].observation) if steps else ""
    return text if len(text) <= 2 * REPLY_CHARS else text[: 2 * REPLY_CHARS - 1] + "…"
