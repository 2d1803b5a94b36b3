"""``rllm-eval replay RUN`` and ``rllm-eval rescore RUN --grader ...``: stored episodes, no model.

    rllm-eval replay runs/math                      # every step that now differs, exit 1 if any
    rllm-eval replay runs/train/episodes/step_0003.jsonl --limit 20
    rllm-eval rescore runs/math                     # the env's current grader
    rllm-eval rescore runs/math --grader my_rewards.py:strict_reward

RUN is a run folder (``rllm-eval --output``; ``rllm-train``'s with ``trainer.save_episodes``)
or an episode file. Replay writes ``RUN/replay.json``; rescore writes
``RUN/rescore/<grader>.jsonl`` (a row per episode, old and new scores) and
``RUN/rescore/<grader>.summary.json``. Exit status: 0 no difference (replay) / every score
agrees (rescore); 1 some differ; 2 bad input (no such run, a damaged file, an unknown grader).
docs/agents/episodes.md describes the record, replay and re-score.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

from rllm_agents.cli.usage import CommandParser, UsageError, positive_int, report_usage_error
from rllm_agents.episodes.records import EpisodeFileError, ReadReport, read_episodes
from rllm_agents.run_folder import write_atomic
from rllm_agents.types import Episode

PROG = "rllm-eval"
REPLAY_FILE = "replay.json"
RESCORE_FOLDER = "rescore"
SHOWN_DIFFS = 5  # per episode on the terminal; replay.json keeps them all


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="a run folder or an episodes .jsonl file")
    parser.add_argument("--limit", type=positive_int, default=None, help="first N episodes only")
    parser.add_argument(
        "--output", type=Path, default=None, help="where results go (default: the run folder)"
    )


def replay_parser() -> CommandParser:
    parser = CommandParser(
        prog=f"{PROG} replay",
        description="Play recorded actions against the env again, with no model, and report "
        "every step whose observation, reward or end differs.",
    )
    _common(parser)
    return parser


def rescore_parser() -> CommandParser:
    from rllm_agents.episodes.graders import ENV_GRADER, GRADERS

    parser = CommandParser(
        prog=f"{PROG} rescore",
        description="Grade stored episodes again (no model) and set old and new scores side "
        "by side.",
    )
    _common(parser)
    parser.add_argument(
        "--grader",
        default=ENV_GRADER,
        help=f"{' | '.join([ENV_GRADER, *GRADERS])} | module:function | file.py:function "
        f"(default {ENV_GRADER}: the env's own)",
    )
    parser.add_argument(
        "--show", type=positive_int, default=50, help="rows of the side-by-side table shown"
    )
    return parser


def episodes_of(args: argparse.Namespace, report: ReadReport) -> Iterator[Episode]:
    """The run's episodes (the first --limit), a damaged record a UsageError."""
    try:
        yield from itertools.islice(read_episodes(args.run, report), args.limit)
    except EpisodeFileError as error:
        raise UsageError(str(error)) from None


def output_folder(args: argparse.Namespace) -> Path:
    if args.output is not None:
        return args.output
    return args.run if args.run.is_dir() else args.run.parent


def check_run(args: argparse.Namespace) -> None:
    """Refuse a missing or empty run before anything is made (envs, graders)."""
    from rllm_agents.episodes.records import episode_files

    try:
        episode_files(args.run)
    except EpisodeFileError as error:
        raise UsageError(str(error)) from None


# ---- replay ----------------------------------------------------------------------------------


def replay_main(argv: list[str]) -> int:
    from rllm_agents.episodes.envs import RecordedEnvs
    from rllm_agents.episodes.replay import replay_episode

    args = replay_parser().parse_args(argv)
    check_run(args)
    report = ReadReport()
    results = []
    with RecordedEnvs() as envs:
        for episode in episodes_of(args, report):
            result = replay_episode(episode, envs)
            results.append(result)
            _print_replay(result)
    differ = [result for result in results if result.diffs]
    skipped = [result for result in results if result.skipped]
    summary = {
        "run": str(args.run),
        "episodes": len(results),
        "identical": sum(result.identical for result in results),
        "differ": len(differ),
        "skipped": len(skipped),
        "read": report.describe(),
    }
    folder = output_folder(args)
    folder.mkdir(parents=True, exist_ok=True)
    record = {**summary, "episodes_replayed": [result.to_dict() for result in results]}
    write_atomic(folder / REPLAY_FILE, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(
        f"{PROG} replay: {summary['episodes']} episodes, {summary['identical']} identical, "
        f"{summary['differ']} differ, {summary['skipped']} not replayable ({report.describe()}); "
        f"details in {folder / REPLAY_FILE}"
    )
    return 1 if differ else 0


def _print_replay(result) -> None:
    if result.skipped:
        print(f"{result.episode_id}: not replayable: {result.skipped}")
        return
    if not result.diffs:
        return
    print(f"{result.episode_id}: {len(result.diffs)} difference(s) in {result.steps} steps")
    for diff in result.diffs[:SHOWN_DIFFS]:
        print(f"  {diff.describe()}")
    if len(result.diffs) > SHOWN_DIFFS:
        print(f"  ... and {len(result.diffs) - SHOWN_DIFFS} more (see {REPLAY_FILE})")


# ---- rescore ---------------------------------------------------------------------------------


def rescore_main(argv: list[str]) -> int:
    from rllm_agents.episodes.envs import RecordedEnvs
    from rllm_agents.episodes.rescore import (
        RescoreSummary,
        UnknownGrader,
        disagreements,
        resolve_grader,
        score_episode,
    )

    args = rescore_parser().parse_args(argv)
    check_run(args)
    try:
        choice = resolve_grader(args.grader)
    except UnknownGrader as error:
        raise UsageError(str(error)) from None
    report = ReadReport()
    rows = []
    with RecordedEnvs() as envs:
        for episode in episodes_of(args, report):
            rows.append(score_episode(episode, *choice.for_episode(envs, episode)))
    summary = RescoreSummary.of(args.grader, rows)
    folder = output_folder(args) / RESCORE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.grader)
    write_atomic(folder / f"{slug}.jsonl", "".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    write_atomic(
        folder / f"{slug}.summary.json",
        json.dumps({**asdict(summary), "read": report.describe()}, indent=2) + "\n",
    )
    _print_rescore(rows, disagreements(rows), summary, args.show)
    print(f"{PROG} rescore: {report.describe()}; rows in {folder / (slug + '.jsonl')}")
    return 1 if summary.disagree or summary.errors else 0


def _print_rescore(rows, disagreeing, summary, shown: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 110))

    def table(title: str, selected) -> Table:
        result = Table(title=title)
        for column in ("episode", "grader", "old reward", "new reward", "old ok", "new ok", ""):
            result.add_column(column, justify="left" if column in ("episode", "") else "right")
        for row in selected:
            new = "-" if row.new_reward is None else f"{row.new_reward:.4g}"
            mark = "" if row.agrees else (row.error or "DISAGREES")
            result.add_row(row.episode_id, row.grader, f"{row.old_reward:.4g}", new,
                           str(row.old_correct), str(row.new_correct), mark)  # fmt: skip
        return result

    console.print(table(f"old and new scores (first {min(shown, len(rows))} of {len(rows)})",
                        rows[:shown]))  # fmt: skip
    if disagreeing:
        console.print(table(f"{len(disagreeing)} disagreement(s)", disagreeing))
    new_mean = "-" if summary.new_mean_reward is None else f"{summary.new_mean_reward:.4f}"
    console.print(
        f"{summary.episodes} episodes: {summary.agree} agree, {summary.disagree} disagree, "
        f"{summary.errors} could not be graded; mean reward old {summary.old_mean_reward:.4f}, "
        f"new {new_mean}"
    )


# Subcommands of rllm-eval by name; anything else is the evaluation itself (``--env ...``).
SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {
    "replay": replay_main,
    "rescore": rescore_main,
}


def main(argv: list[str]) -> int:
    """Run the subcommand argv[0] names (one of SUBCOMMANDS)."""
    name, rest = argv[0], argv[1:]
    try:
        return SUBCOMMANDS[name](rest)
    except UsageError as error:
        return report_usage_error(f"{PROG} {name}", error)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
