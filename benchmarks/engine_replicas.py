"""Rollout replicas side by side: native training with 1, 2, ... engines apart.

Each side runs ``rllm-train`` as a user does, one after the other, with the same config, seed
and overrides (by default the process engine in async mode); only ``rollout.engine_replicas``
differs. ``rollout.engine_threads`` (or its default: half the cores for the process engine) is
divided among the replicas, at least one thread each; on 2 cores that is one thread for one
replica and one each for two.

Printed per side: the wall time of the whole command (start-up included: one engine process
per replica), the median step time after the first, the trainer's wait for episodes, the
engines' generation time and the update time, the requests each replica served per step (mean)
and the oldest and newest version the replicas held; then each side's step time as a ratio to
the first side's. Where the replicas share the cores the ratio is mostly what coordinating them
costs (routing every request, a push per replica after every update, one more process).
``--rounds`` runs the sides in turn several times (medians over all), so that load from other
jobs on a shared machine falls on every side alike.

    python benchmarks/engine_replicas.py                               # 1 and 2 replicas
    python benchmarks/engine_replicas.py --rounds 3 --mode sync        # a shared machine
    python benchmarks/engine_replicas.py --replicas 1,2,4 --steps 8 rollout.n=8
    python benchmarks/engine_replicas.py --model tiny --steps 2        # smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from verl_vs_native import run_training, show

REQUESTS = "rollout/replica_requests/"
VERSION = "rollout/replica_version/"


def run_side(replicas: int, output: Path, args: argparse.Namespace) -> tuple[list[dict], float]:
    command = [
        sys.executable, "-m", "rllm_train.cli", "--model", args.model,
        "--steps", str(args.steps), "--seed", str(args.seed), "--output", str(output),
        "--no-progress", "trainer.validate_held_out=false", "trainer.save_every=0",
        "trainer.tensorboard=false", f"rollout.mode={args.mode}",
        f"rollout.engine={args.engine}", f"rollout.engine_replicas={replicas}", *args.overrides,
    ]  # fmt: skip
    timeout = args.side_timeout or None
    return run_training(
        f"{replicas} replicas", command, output, timeout=timeout, keep_going=bool(timeout)
    )


Run = tuple[list[dict], float]  # one side's step rows and the command's wall seconds


def served_per_step(rows: list[dict], replicas: int) -> list[float]:
    """Each replica's requests per step, mean over the steps (none for one engine: its rows
    carry no replica metrics)."""
    if replicas == 1:
        return []
    return [statistics.fmean(row.get(f"{REQUESTS}{k}", 0) for row in rows) for k in range(replicas)]


def versions(rows: list[dict], replicas: int) -> str:
    held = [row[f"{VERSION}{k}"] for row in rows for k in range(replicas) if f"{VERSION}{k}" in row]
    return f"{min(held)}-{max(held)}" if held else "-"


def median_of_runs(runs: list[Run], key: str) -> float | None:
    """The median of `key` over every run's steps but its first (warm-up)."""
    values = [
        row[key] for rows, _ in runs for row in rows[1:] if isinstance(row.get(key), (int, float))
    ]
    return statistics.median(values) if values else None


def summary(runs: list[Run], replicas: int) -> dict[str, object]:
    rows = [row for run_rows, _ in runs for row in run_rows]
    served = served_per_step(rows, replicas)
    return {
        "command s": statistics.median(seconds for _, seconds in runs),
        "step s": median_of_runs(runs, "time/step_s"),
        "wait s": median_of_runs(runs, "time/rollout_s"),
        "generate s": median_of_runs(runs, "time/generate_s"),
        "update s": median_of_runs(runs, "time/update_s"),
        "requests/replica": "/".join(f"{count:.1f}" for count in served) or "-",
        "versions": versions(rows, replicas),
    }


def print_summary(summaries: dict[int, dict[str, object]]) -> None:
    columns = list(next(iter(summaries.values())))
    print("\n| replicas | " + " | ".join(columns) + " | x step time |")
    print("|---" * (len(columns) + 2) + "|")
    first = next(iter(summaries.values()))["step s"]
    for replicas, values in summaries.items():
        cells = [show(v) if not isinstance(v, str) else v for v in values.values()]
        step = values["step s"]
        ratio = f"{step / first:.2f}x" if step and first else "-"
        print(f"| {replicas} | " + " | ".join(cells) + f" | {ratio} |")
    print(
        "(step/wait/generate/update s: medians over the steps after each run's first; "
        "command s: median of the runs; requests/replica: mean per step)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="1,2", help="comma-separated replica counts")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", default="async", choices=("sync", "async"))
    parser.add_argument("--engine", default="process")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each side, taken in turn")
    parser.add_argument(
        "--side-timeout",
        type=float,
        default=0,
        help="seconds per side (0: none); a side that fails or runs out is reported with the "
        "steps it finished, and the others go on",
    )
    parser.add_argument("overrides", nargs="*", help="section.key=value, given to every side")
    args = parser.parse_args()
    counts = [int(count) for count in args.replicas.split(",") if count.strip()]
    runs: dict[int, list[Run]] = {replicas: [] for replicas in counts}
    with tempfile.TemporaryDirectory(prefix="rllm-replicas-bench-") as folder:
        # Sides taken in turn, round after round: load from other jobs on a shared machine
        # then falls on every side alike instead of on whichever ran while it lasted.
        for round_ in range(args.rounds):
            for replicas in counts:
                output = Path(folder) / f"replicas-{replicas}-{round_}"
                rows, seconds = run_side(replicas, output, args)
                print(
                    f"{replicas} replicas: {len(rows)} steps in {seconds:.0f} s (start-up included)"
                )
                if len(rows) >= 2:
                    runs[replicas].append((rows, seconds))
    summaries = {replicas: summary(done, replicas) for replicas, done in runs.items() if done}
    if not summaries:
        sys.exit("no side finished two steps")
    print_summary(summaries)


if __name__ == "__main__":
    main()
