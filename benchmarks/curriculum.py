"""Uniform task sampling against a curriculum, side by side, on a pool of mixed difficulty.

Each side runs ``rllm-train`` as a user does, one after the other, with the same model, seed,
pool and settings; only ``curriculum.kind`` differs (``--kinds``, default ``uniform,plr``).
The pool is ``--per-size`` tasks of each of ``--sizes``, written to a task file the runs train
on (``--family``):

    frozenlake  rllm/FrozenLake-v0 lakes of each size (generated maps, frozen-tile probability
                0.8, not slippery). With rollout.max_turns below a big lake's shortest path,
                those lakes cannot be solved at all.
    arithmetic  rllm/Arithmetic-v0 additions of two numbers of each number of digits.

Tasks the policy never (or always) solves give groups of equal rewards, which teach GRPO
nothing: the waste a curriculum avoids. Printed per side and step: the mean train reward, the
share of such groups (``curriculum/uninformative_groups``) and the sizes played; then per side:
the mean uninformative share (all steps, and after ``--warmup`` steps, once the curriculum has
seen the pool), the episodes played before the train reward's moving average (``--window``
steps) first reached ``--target`` ("-": never within the run), the success rate and share of
episodes of each size, the held-out reward before and after (``--val-per-size`` tasks of each
size that no side trains on, greedy) and the wall time. The train reward is measured on the
tasks each side chose, so a curriculum's is also higher because it plays the tasks that pay;
the uninformative share and the held-out reward are the measures that do not lean its way.

    python benchmarks/curriculum.py                           # SmolLM2 on lakes of size 2-5
    python benchmarks/curriculum.py --family arithmetic --sizes 1,2,3,4 --steps 12 \\
        --val-per-size 4                                      # the CPU learning comparison
    python benchmarks/curriculum.py --model tiny --steps 2    # a quick look at the plumbing
    python benchmarks/curriculum.py --steps 60 trainer.device=cuda   # lakes, on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rllm_agents.episodes.records import TRAIN_EPISODES_FOLDER, read_episodes
from verl_vs_native import run_training

LAKE_PROMPT = "Reply with one move only (Left, Down, Right or Up)."


def lake_row(size: int, rng: np.random.Generator) -> dict:
    return {"seed": int(rng.integers(2**31 - 1)), "size": size, "p": 0.8, "slippery": False}


def addition_row(digits: int, rng: np.random.Generator) -> dict:
    low = 0 if digits == 1 else 10 ** (digits - 1)
    a, b = (int(value) for value in rng.integers(low, 10**digits, size=2))
    return {"a": a, "b": b}


@dataclass(frozen=True)
class Family:
    env_id: str
    prefix: str  # task ids are <prefix><size>-<index>
    size_word: str
    row: Callable[[int, np.random.Generator], dict]
    settings: tuple[str, ...]  # its rllm-train overrides (--max-turns etc. are added to lakes)


FAMILIES = {
    "frozenlake": Family(
        "rllm/FrozenLake-v0",
        "lake",
        "lake size",
        lake_row,
        (f"env.system_prompt={json.dumps(LAKE_PROMPT)}",),
    ),
    "arithmetic": Family("rllm/Arithmetic-v0", "add", "digits", addition_row, ()),
}


def pool_rows(
    family: Family, sizes: list[int], per_size: int, seed: int, stream: int
) -> list[dict]:
    """`per_size` tasks of each size; `stream` 0 for training, 1 for the held-out ones."""
    rng = np.random.default_rng([seed, stream])
    return [
        {"task_id": f"{family.prefix}{size}-{stream}-{index}", **family.row(size, rng)}
        for size in sizes
        for index in range(per_size)
    ]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def size_of(task_id: str, family: Family) -> int:
    return int(task_id.removeprefix(family.prefix).partition("-")[0])


def run_side(
    kind: str, output: Path, family: Family, files: dict[str, Path], args: argparse.Namespace
) -> list[dict]:
    held_out = (
        [f"data.val={files['val']}", "trainer.val_tasks=0"]
        if "val" in files
        else ["trainer.validate_held_out=false"]
    )
    command = [
        sys.executable, "-m", "rllm_train.cli", "--model", args.model, "--env", family.env_id,
        "--steps", str(args.steps), "--seed", str(args.seed), "--output", str(output), "--no-progress",
        f"data.train={files['train']}", *held_out, *family.settings,
        f"rollout.tasks_per_step={args.tasks_per_step}", f"rollout.n={args.n}",
        "algorithm.drop_zero_advantage=true", f"trainer.lr={args.lr}", "trainer.save_episodes=true",
        "trainer.save_every=0", "trainer.tensorboard=false", f"curriculum.kind={kind}",
        *args.overrides,
    ]  # fmt: skip
    rows, _ = run_training(kind, command, output)
    return rows


def episodes_to_target(rows: list[dict], target: float, window: int) -> int | None:
    """Episodes played up to the step at which the mean train reward of the last `window`
    steps first reached `target` (None: never)."""
    rewards = [row["reward_mean"] for row in rows]
    played = 0
    for end, row in enumerate(rows, 1):
        played += row["episodes"]
        if end >= window and statistics.fmean(rewards[end - window : end]) >= target:
            return played
    return None


def by_size(output: Path, family: Family) -> dict[int, tuple[int, float]]:
    """{size: (episodes played, success rate)} over the run's saved training episodes."""
    rewards: dict[int, list[float]] = {}
    for episode in read_episodes(output / TRAIN_EPISODES_FOLDER):
        size = size_of(str(episode.info.get("task_key")), family)
        rewards.setdefault(size, []).append(episode.reward)
    return {size: (len(r), statistics.fmean(r)) for size, r in sorted(rewards.items())}


def val_rewards(output: Path) -> tuple[float | None, float | None]:
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    values = [row["val/reward_mean"] for row in rows if "val/reward_mean" in row]
    return (values[0], values[-1]) if len(values) >= 2 else (None, None)


def step_rows(output: Path) -> list[dict]:
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "reward_mean" in row]


def plot(results: dict[str, list[dict]], title: str, png: Path) -> None:
    """Train reward and uninformative share per step, every kind in one figure."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (reward, flat) = pyplot.subplots(1, 2, figsize=(9, 3.3), dpi=110)
    for kind, rows in results.items():
        steps = [row["step"] for row in rows]
        reward.plot(steps, [row["reward_mean"] for row in rows], marker="o", ms=3, label=kind)
        flat.plot(
            steps,
            [row["curriculum/uninformative_groups"] for row in rows],
            marker="o",
            ms=3,
            label=kind,
        )
    reward.set_ylabel("mean train reward")
    flat.set_ylabel("groups with equal rewards")
    for axes in (reward, flat):
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(png)
    pyplot.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="frozenlake")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--kinds", default="uniform,plr")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", default="2,3,4,5")
    parser.add_argument("--per-size", type=int, default=4)
    parser.add_argument("--val-per-size", type=int, default=0)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument(
        "--report-only", action="store_true", help="print and plot the runs already in --output"
    )
    parser.add_argument("overrides", nargs="*", help="section.key=value for every side")
    args = parser.parse_args()
    family = FAMILIES[args.family]
    if args.family == "frozenlake":
        args.overrides = ["rollout.max_turns=4", "rollout.max_response_tokens=4", *args.overrides]
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    sizes = [int(size) for size in args.sizes.split(",")]

    if args.report_only and args.output is None:
        parser.error("--report-only reads the runs of an earlier --output")
    root = args.output or Path(tempfile.mkdtemp(prefix="curriculum-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    if not args.report_only:
        train = pool_rows(family, sizes, args.per_size, args.seed, 0)
        files["train"] = write_rows(root / "train.jsonl", train)
        if args.val_per_size:
            val = pool_rows(family, sizes, args.val_per_size, args.seed, 1)
            files["val"] = write_rows(root / "val.jsonl", val)
    print(
        f"{args.model} on {family.env_id}: {args.per_size} tasks per {family.size_word} "
        f"({args.sizes}), {args.tasks_per_step} tasks x {args.n} per step, {args.steps} steps "
        f"per side, seed {args.seed}; {' '.join(args.overrides)}"
    )

    results: dict[str, list[dict]] = {}
    seconds: dict[str, float | None] = {}
    for kind in kinds:
        if args.report_only:
            results[kind], seconds[kind] = step_rows(root / kind), None
            continue
        started = time.perf_counter()
        results[kind] = run_side(kind, root / kind, family, files, args)
        seconds[kind] = time.perf_counter() - started
        print(f"{kind}: {seconds[kind]:.0f} s", flush=True)

    print("\nstep | " + " | ".join(f"{kind}: reward, uninformative, sizes" for kind in kinds))
    for index in range(args.steps):
        cells = []
        for kind in kinds:
            row = results[kind][index]
            played = ",".join(str(size_of(task, family)) for task in row["task_ids"])
            cells.append(
                f"{row['reward_mean']:.3f}, {row['curriculum/uninformative_groups']:.2f}, {played}"
            )
        print(f"{index + 1} | " + " | ".join(cells))

    print(
        "\nkind | uninformative (all) | uninformative (after warm-up) | train reward | "
        f"episodes to train reward {args.target} | {family.size_word}: episodes, success | "
        "held-out reward before -> after | wall s"
    )
    for kind in kinds:
        rows = results[kind]
        flat = [row["curriculum/uninformative_groups"] for row in rows]
        later = flat[args.warmup :] or flat
        sizes_played = ", ".join(
            f"{size}: {count}, {rate:.2f}"
            for size, (count, rate) in by_size(root / kind, family).items()
        )
        reached = episodes_to_target(rows, args.target, args.window)
        before, after = val_rewards(root / kind)
        held_out = f"{before:.3f} -> {after:.3f}" if before is not None else "-"
        print(
            f"{kind} | {statistics.fmean(flat):.3f} | {statistics.fmean(later):.3f} | "
            f"{statistics.fmean(row['reward_mean'] for row in rows):.3f} | "
            f"{reached if reached is not None else '-'} | {sizes_played} | {held_out} | "
            f"{f'{seconds[kind]:.0f}' if seconds[kind] is not None else '-'}"
        )
    png = root / "curriculum.png"
    plot(results, f"{args.model} on {family.env_id}, {family.size_word} {args.sizes}", png)
    print(f"\nruns in {root}; curves: {png}")


if __name__ == "__main__":
    main()
