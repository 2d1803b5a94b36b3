"""What the viewer shows, as plain data: a run folder's episodes, filters, one episode's turns.

A run folder is an ``rllm-eval --output`` folder (``episodes.jsonl``, ``summary.json``) or an
``rllm-train`` one (``metrics.jsonl`` with a row per step, ``config.yaml``, and - with
``trainer.save_episodes`` - each step's sampled episodes in ``episodes/step_N.jsonl``). Episodes
are read with the shared reader (:func:`rllm_agents.episodes.read_records`), which also tells
each training episode's step: the page shows it and filters by it, next to the reward curve
of the same steps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rllm_envs.core.json_lines import DamagedLineError, whole_objects

from rllm_agents.episodes import EpisodeFileError, ReadReport, episode_files, read_records
from rllm_agents.episodes.records import (
    EVAL_EPISODES_FILE,
    TRAIN_EPISODES_FOLDER,
    TRAIN_STEP_PATTERN,
    VALIDATION_EPISODES_FOLDER,
)
from rllm_agents.metrics import task_name
from rllm_agents.types import Episode, Trajectory

METRICS_FILE = "metrics.jsonl"
# What makes a folder a run folder: any one of these in it.
RUN_FILES = (EVAL_EPISODES_FILE, METRICS_FILE, "summary.json", TRAIN_EPISODES_FOLDER)
OK = "ok"  # the outcome of an episode that ran to an end
ERROR = "error"  # the outcome of one the model server or the loop ended


class RunError(ValueError):
    """A path that is not a run folder, or a file in it that cannot be read (names which)."""


@dataclass(frozen=True)
class Run:
    path: Path
    kind: str  # "eval" or "train"
    model: str  # what the run's config names, "" when unknown
    env: str
    episodes: list[Episode]
    steps: list[int | None]  # steps[i]: the training step episodes[i] was sampled at, or None
    metrics: list[dict[str, Any]]  # rllm-train's per-step rows ([] for rllm-eval)
    summary: dict[str, Any]
    cut_lines: list[str] = field(default_factory=list)  # skipped lines a killed writer cut short


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    """rllm-train's rows; a last line cut short (a run still writing it) is left out."""
    try:
        return [row for _, row in whole_objects(path, skip_cut_short=True)]
    except DamagedLineError as error:
        raise RunError(str(error)) from None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise RunError(f"{path} is not JSON ({error.msg})") from None
    except UnicodeDecodeError as error:
        raise RunError(f"{path} is not UTF-8 (byte at offset {error.start})") from None
    return data if isinstance(data, dict) else {}


def _train_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return data if isinstance(data, dict) else {}


def run_folder_of(given: Path) -> Path:
    """The run folder of `given`: itself, or the folder above a file or a train run's
    ``episodes`` or ``validation`` folder (where the run's metrics and config are)."""
    folder = given.parent if given.is_file() else given
    episode_folders = (TRAIN_EPISODES_FOLDER, VALIDATION_EPISODES_FOLDER)
    if folder.name in episode_folders and any(folder.glob(TRAIN_STEP_PATTERN)):
        return folder.parent
    return folder


def read_run_episodes(given: Path) -> tuple[list[Episode], list[int | None], ReadReport]:
    """The episodes under `given` with their training steps; none for a run that kept none
    (rllm-train without ``trainer.save_episodes``: its curve is still worth a look)."""
    report = ReadReport()
    try:
        episode_files(given)
    except EpisodeFileError:
        return [], [], report
    try:
        records = list(read_records(given, report))
    except EpisodeFileError as error:
        raise RunError(str(error)) from None
    return [episode for _, episode in records], [where.step for where, _ in records], report


def load_run(path: str | Path) -> Run:
    """The run in folder `path` (or the episodes file `path`); a RunError if there is none."""
    given = Path(path).expanduser()
    if not given.exists():
        raise RunError(f"{path} does not exist")
    folder = run_folder_of(given)
    if given.is_dir() and not any((folder / name).exists() for name in RUN_FILES):
        raise RunError(
            f"{path} is not a run folder: it holds none of {', '.join(RUN_FILES)} "
            "(give an rllm-eval --output or rllm-train --output folder)"
        )
    episodes, steps, report = read_run_episodes(given)
    metrics_path = folder / METRICS_FILE
    metrics = _read_metrics(metrics_path) if metrics_path.is_file() else []
    summary = _read_json(folder / "summary.json")
    train = _train_config(folder) if metrics or (folder / "config.yaml").is_file() else {}
    if train:
        model = str(train.get("model", {}).get("name", ""))
        env = str(train.get("env", {}).get("id", ""))
    else:
        config = summary.get("config", {}) if isinstance(summary.get("config"), dict) else {}
        model, env = str(config.get("model") or ""), str(config.get("env") or "")
    kind = "train" if train else "eval"
    return Run(folder, kind, model, env, episodes, steps, metrics, summary, report.cut_lines)


# ---- the list and its filters -----------------------------------------------------------------


def outcome(episode: Episode) -> str:
    """How an episode ended, for the filter: the env's failure kind, ``error``, or ``ok``."""
    if episode.failure:
        return str(episode.failure)
    if episode.error:
        return ERROR
    return OK


def episode_row(index: int, episode: Episode, step: int | None = None) -> dict[str, Any]:
    """One line of the episode list (`step`: the training step it was sampled at)."""
    turns = [turn for trajectory in episode.trajectories for turn in trajectory.steps]
    return {
        "index": index,
        "step": step,
        "id": episode.id,
        "task": task_name(episode),
        "reward": episode.reward,
        "correct": episode.is_correct,
        "termination": episode.termination_reason.value if episode.termination_reason else None,
        "outcome": outcome(episode),
        "turns": len(turns),
        "tokens": sum(len(turn.response_ids) for turn in turns),
    }


def episode_rows(run: Run) -> list[dict[str, Any]]:
    """The episode list, in the order recorded."""
    return [
        episode_row(index, episode, step)
        for index, (episode, step) in enumerate(zip(run.episodes, run.steps, strict=True))
    ]


@dataclass(frozen=True)
class EpisodeQuery:
    reward_min: float = -math.inf
    reward_max: float = math.inf
    task: str = ""  # a part of the task name
    outcome: str = ""  # one outcome; "" = any
    step: int | None = None  # one training step; None = any

    @classmethod
    def from_params(cls, params: dict[str, str]) -> EpisodeQuery:
        """From URL query parameters; a RunError naming a bad number."""
        numbers: dict[str, Any] = {}
        for key, kind in (("reward_min", float), ("reward_max", float), ("step", int)):
            text = params.get(key, "").strip()
            if text:
                try:
                    numbers[key] = kind(text)
                except ValueError:
                    expected = "a whole number" if kind is int else "a number"
                    raise RunError(f"{key}: expected {expected}, got {text!r}") from None
        return cls(
            task=params.get("task", "").strip(), outcome=params.get("outcome", ""), **numbers
        )

    def matches(self, row: dict[str, Any]) -> bool:
        return (
            self.reward_min <= row["reward"] <= self.reward_max
            and self.task.lower() in row["task"].lower()
            and (not self.outcome or row["outcome"] == self.outcome)
            and (self.step is None or row["step"] == self.step)
        )


def run_overview(run: Run) -> dict[str, Any]:
    """The page's header: what the run is, the filter choices, the per-step curve."""
    rows = episode_rows(run)
    rewards = [row["reward"] for row in rows]
    return {
        "path": str(run.path),
        "kind": run.kind,
        "model": run.model,
        "env": run.env,
        "episodes": len(rows),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "outcomes": sorted({row["outcome"] for row in rows}),
        "steps": sorted({row["step"] for row in rows if row["step"] is not None}),
        "reward_range": [min(rewards), max(rewards)] if rewards else None,
        "curve": reward_curve(run.metrics),
    }


def reward_curve(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per training step: the mean reward, and the validation reward where measured."""
    points = []
    for row in metrics:
        point = {"step": row.get("step", 0)}
        for key in ("reward_mean", "val/reward_mean", "loss"):
            if isinstance(row.get(key), (int, float)):
                point[key] = row[key]
        if len(point) > 1:
            points.append(point)
    return points


# ---- one episode --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    text: str
    trained: bool  # the tokens carry loss in training (the model generated them)
    tokens: int
    boundary: bool = False  # not tokens: where one training sequence ends and the next begins


@dataclass
class TokenView:
    segments: list[Segment] = field(default_factory=list)
    decoded: bool = True  # False: the segments hold token ids, no tokenizer was at hand


def token_segments(
    ids: list[int], mask: list[int], decode: Callable[[list[int]], str] | None
) -> list[Segment]:
    """Runs of tokens with the same mask, decoded (or as ids without a tokenizer)."""
    segments: list[Segment] = []
    start = 0
    for position in range(1, len(ids) + 1):
        if position == len(ids) or bool(mask[position]) != bool(mask[start]):
            run = ids[start:position]
            text = decode(run) if decode else " ".join(str(token) for token in run)
            segments.append(Segment(text, bool(mask[start]), len(run)))
            start = position
    return segments


def trajectory_tokens(
    trajectory: Trajectory, decode: Callable[[list[int]], str] | None
) -> TokenView:
    """The trajectory's tokens as trained: the whole conversation when it has one token list,
    each of its sequences when it took several (a compacted context), else turn by turn
    (prompt, then completion)."""
    if trajectory.sequences:
        view = TokenView(decoded=decode is not None)
        count = len(trajectory.sequences)
        for number, sequence in enumerate(trajectory.sequences, start=1):
            title = f"sequence {number} of {count}" + (
                "" if number == 1 else ": a new prompt, its context compacted or rewritten"
            )
            view.segments.append(Segment(title, False, 0, boundary=True))
            ids = list(sequence.prompt_ids) + list(sequence.response_ids)
            mask = [0] * len(sequence.prompt_ids) + [int(m) for m in sequence.response_mask]
            view.segments.extend(token_segments(ids, mask, decode))
        return view
    if trajectory.response_ids:
        ids = list(trajectory.prompt_ids) + list(trajectory.response_ids)
        mask = [0] * len(trajectory.prompt_ids) + [int(m) for m in trajectory.response_mask]
        return TokenView(token_segments(ids, mask, decode), decode is not None)
    view = TokenView(decoded=decode is not None)
    for step in trajectory.steps:
        ids = list(step.prompt_ids) + list(step.response_ids)
        mask = [0] * len(step.prompt_ids) + [1] * len(step.response_ids)
        view.segments.extend(token_segments(ids, mask, decode))
    return view


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def episode_detail(
    index: int,
    episode: Episode,
    decode: Callable[[list[int]], str] | None,
    step: int | None = None,
) -> dict[str, Any]:
    """Everything the episode page shows: each agent's turns, rewards and trained tokens."""
    trajectories = []
    for trajectory in episode.trajectories:
        turns = [
            {
                "observation": _jsonable(step.observation),
                "response": step.model_response,
                "thought": step.thought,
                "action": _jsonable(step.action),
                "reward": step.reward,
                "done": step.done,
                "info": _jsonable(step.info),
                "finish_reason": step.finish_reason,
            }
            for step in trajectory.steps
        ]
        view = trajectory_tokens(trajectory, decode)
        trajectories.append(
            {
                "name": trajectory.name,
                "reward": trajectory.reward,
                "turns": turns,
                "tokens": [asdict(segment) for segment in view.segments],
                "tokens_decoded": view.decoded,
                "compactions": _jsonable(trajectory.info.get("compactions", [])),
                "info": _jsonable(trajectory.info),
            }
        )
    return {
        **episode_row(index, episode, step),
        "error": episode.error,
        "failure": episode.failure,
        "task_data": _jsonable(episode.task),
        "metrics": episode.metrics,
        "trajectories": trajectories,
    }
