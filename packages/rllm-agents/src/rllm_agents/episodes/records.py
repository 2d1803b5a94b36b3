"""Episode records on disk: one JSON object a line (``Episode.to_json``), read back here.

Where the episodes of a path are (:func:`episode_files`):

* a ``.jsonl`` file: that file;
* an ``rllm-eval`` run folder: its ``episodes.jsonl``;
* an ``rllm-train`` run folder: ``episodes/step_*.jsonl`` in step order (written with
  ``trainer.save_episodes``), or that ``episodes`` folder itself.

Lines are read as bytes (:mod:`rllm_envs.core.json_lines`). A run killed while writing
(``kill -9``) can leave its last line cut short; that line has no newline at its end, which is
how it is told apart from damage: it is skipped and reported (:class:`ReadReport`), while a
damaged line *with* its newline (not UTF-8, not JSON) is an :class:`EpisodeFileError` naming
``file:line``.
Records of every format version read (version 1, written before the version field, reads
with no env record); a record from a newer version than this code knows is refused.

:func:`read_episodes` gives the episodes alone; :func:`read_records` gives each with where it
was read (:class:`RecordSource`: file, line, and the training step of an rllm-train file), for
readers that name a record in their own errors (``rllm-train --algorithm sft``) or show the
step it was sampled at (``rllm-view``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rllm_envs.core.json_lines import read_lines

from rllm_agents.types import EPISODE_FORMAT_VERSION, Episode

EVAL_EPISODES_FILE = "episodes.jsonl"
TRAIN_EPISODES_FOLDER = "episodes"
# rllm-train's greedy validation episodes, validation/step_NNNN.jsonl (step_0000: untrained).
VALIDATION_EPISODES_FOLDER = "validation"
TRAIN_STEP_PATTERN = "step_*.jsonl"


class EpisodeFileError(ValueError):
    """A path that holds no episodes, or a record that cannot be read; one line for the user."""


@dataclass
class ReadReport:
    """What a read found besides the episodes: lines cut short by a killed writer."""

    files: list[Path] = field(default_factory=list)
    episodes: int = 0
    cut_lines: list[str] = field(default_factory=list)  # "path:line" of each partial last line

    def describe(self) -> str:
        cut = f"; skipped a cut-short last line at {', '.join(self.cut_lines)}" * bool(
            self.cut_lines
        )
        return f"{self.episodes} episodes from {len(self.files)} file(s){cut}"


def episode_files(path: str | Path) -> list[Path]:
    """The episode files `path` stands for (module docstring), or an EpisodeFileError."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.exists():
        raise EpisodeFileError(f"{path}: no such file or run folder")
    if (path / EVAL_EPISODES_FILE).is_file():
        return [path / EVAL_EPISODES_FILE]
    folder = path / TRAIN_EPISODES_FOLDER if (path / TRAIN_EPISODES_FOLDER).is_dir() else path
    steps = sorted(folder.glob(TRAIN_STEP_PATTERN), key=_step_order)
    if steps:
        return steps
    raise EpisodeFileError(
        f"{path}: holds no episodes (no {EVAL_EPISODES_FILE}, no "
        f"{TRAIN_EPISODES_FOLDER}/{TRAIN_STEP_PATTERN}); give a run folder or a .jsonl file"
    )


@dataclass(frozen=True)
class RecordSource:
    """Where one episode record was read."""

    file: Path
    line: int
    step: int | None  # the rllm-train step of an ``episodes/step_N.jsonl`` file, else None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def read_episodes(path: str | Path, report: ReadReport | None = None) -> Iterator[Episode]:
    """Every episode recorded under `path` (a file or a run folder), in the order written.

    Streams: one line in memory at a time. Pass a ReadReport to learn which files were read
    and whether a cut-short last line was skipped."""
    for _, episode in read_records(path, report):
        yield episode


def read_records(
    path: str | Path, report: ReadReport | None = None
) -> Iterator[tuple[RecordSource, Episode]]:
    """(where, episode) for every episode recorded under `path`, as :func:`read_episodes`."""
    report = report if report is not None else ReadReport()
    for file in episode_files(path):
        report.files.append(file)
        step = train_step(file)
        for number, episode in _read_file(file, report):
            report.episodes += 1
            yield RecordSource(file, number, step), episode


def _read_file(file: Path, report: ReadReport) -> Iterator[tuple[int, Episode]]:
    for line in read_lines(file):
        where = f"{file}:{line.number}"
        if line.cut_short:
            report.cut_lines.append(where)
            return
        if line.value is None:
            raise EpisodeFileError(f"{where}: not a JSON record ({line.problem})")
        yield line.number, parse_record(line.value, where)


def parse_record(data: object, where: str) -> Episode:
    """One decoded line as an Episode, or an EpisodeFileError naming `where`."""
    if not isinstance(data, dict):
        raise EpisodeFileError(f"{where}: an episode record is a JSON object, not {data!r:.60}")
    version = data.get("format_version", 1)
    if not isinstance(version, int) or version > EPISODE_FORMAT_VERSION:
        raise EpisodeFileError(
            f"{where}: format_version {version!r} is newer than this rllm reads "
            f"({EPISODE_FORMAT_VERSION}); upgrade rllm-agents"
        )
    try:
        return Episode.from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise EpisodeFileError(f"{where}: not an episode record ({error})") from None


def episodes_text(episodes: Iterable[Episode]) -> str:
    """`episodes` as the lines of an episode file."""
    return "".join(episode.to_json() + "\n" for episode in episodes)


def train_step(file: Path) -> int | None:
    """The step an rllm-train episode file holds (``step_0012.jsonl``: 12), else None."""
    prefix, _, digits = file.stem.rpartition("_")
    return int(digits) if prefix == "step" and digits.isdigit() else None


def _step_order(file: Path) -> tuple[int, str]:
    step = train_step(file)
    return (-1 if step is None else step, file.name)
