"""The jobs of an ``rllm-eval`` run - one (task row or None, seed) per episode - and what a
resumed run keeps of the last one in its output folder."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from rllm_agents.cli.usage import UsageError
from rllm_agents.episodes.records import (
    EVAL_EPISODES_FILE,
    EpisodeFileError,
    episodes_text,
    read_episodes,
)
from rllm_agents.run_folder import write_atomic

SUMMARY_FILE = "summary.json"
RUN_MARKERS = (EVAL_EPISODES_FILE, SUMMARY_FILE)
# Seeds an env that draws its tasks from seeds plays when --num-tasks is not given.
DEFAULT_SEEDED_TASKS = 100

Job = tuple[dict | None, int]


def all_jobs(args: argparse.Namespace, rows: list[dict] | None) -> list[Job]:
    """--n samples of each task row (seeds counted from --seed), or of each seed."""
    if rows is None:
        count = args.num_tasks or DEFAULT_SEEDED_TASKS
        return [(None, args.seed + i) for i in range(count) for _ in range(args.n)]
    repeated = [row for row in rows for _ in range(args.n)]
    return [(row, args.seed + i) for i, row in enumerate(repeated)]


def finished_episodes(path: Path) -> list[Any]:
    """What a resume keeps: the episodes that ran to an end. A last line cut short by a kill
    is dropped (the shared reader skips it); any other bad line is a UsageError naming it,
    since the rewrite below would lose every episode after it (--repair moves such lines
    aside first: rllm_agents.damaged_lines). Infrastructure failures run
    again (their server may be back); the log is rewritten to hold only what is kept,
    through a temporary file, so a kill during the rewrite loses nothing."""
    from rllm_agents.metrics import infrastructure_failure

    if not path.is_file():
        return []
    try:
        kept = [e for e in read_episodes(path) if not infrastructure_failure(e)]
    except EpisodeFileError as error:
        raise UsageError(
            f"--resume: {error}; --repair moves damaged lines aside and keeps every whole "
            "one, --overwrite starts over"
        ) from None
    write_atomic(path, episodes_text(kept))
    return kept


def remaining_jobs(jobs: list[Job], done: list[Any]) -> list[Job]:
    """The jobs no kept episode stands for. A job's seed names it (task rows get one seed
    each); the samples of a seeded task, which share their seed, are told apart by their
    count."""
    finished = Counter(episode.info.get("seed") for episode in done)
    left = []
    for task, seed in jobs:
        if finished[seed] > 0:
            finished[seed] -= 1
        else:
            left.append((task, seed))
    return left
