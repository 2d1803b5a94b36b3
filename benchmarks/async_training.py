"""Synchronous against asynchronous native training, side by side on the same machine.

Each side runs ``rllm-train`` as a user does, one after the other, with the same config, seed
and overrides; only the rollout settings differ:

    sync            rollout.mode=sync  rollout.engine=local     (the default: the trained model
                                                                 generates, then is updated)
    async           rollout.mode=async rollout.engine=local     (a synced copy generates the
                                                                 next step during the update)
    async-process   rollout.mode=async rollout.engine=process   (the copy in a process of its
                                                                 own, half the cores' threads)
    async-process-split  the same, and the update held to the other half of the cores
    async-llamacpp-split llama.cpp on half the cores, the update on the other half
    sync-llamacpp   rollout.mode=sync  rollout.engine=llamacpp  (llama.cpp generates in one batch;
                                                                 an F16 export after each update)
    async-llamacpp  rollout.mode=async rollout.engine=llamacpp
    sync-vllm       rollout.mode=sync  rollout.engine=vllm      (vLLM, its CPU build on a CPU, in
                                                                 processes of its own, every core)
    async-vllm      rollout.mode=async rollout.engine=vllm      (vLLM on half the cores, the update
                                                                 on the other half)

Printed per side: samples/s (episodes trained on per second of the training loop: the steps'
wall time, validation and start-up left out, and the first and last step too, given 4 or more:
warm-up, and a last update with nothing left to generate beside it), the median step time after the first, the time the
trainer waited for episodes, the log-prob gap between the generating engine and the trainer,
staleness, the reward of the last steps and the wall time at which the reward's moving average
(3 steps) first reached ``--target``; then each side's samples/s as a ratio to the first side.
The reward against wall-clock time of every side goes into one PNG.

    python benchmarks/async_training.py                                    # the embedded default
    python benchmarks/async_training.py --env rllm/FrozenLake-v0 --steps 8 \\
        rollout.max_turns=4 rollout.max_response_tokens=48
    python benchmarks/async_training.py --sides sync,async --model tiny --steps 3
    # additions answered with a sentence of reasoning, LoRA: reward and generation both count
    python benchmarks/async_training.py --sides sync,async-llamacpp --steps 10 --lr 1e-3 \\
        model.lora_rank=16 rollout.max_response_tokens=64 env.kwargs.max_operand=20 \\
        "env.system_prompt=Work it out step by step in a short sentence, then give the final number."

On a 2-core CPU, generation and the update fight over the same cores, so the copy in the
trainer's process gains little; llama.cpp generates with its own kernels, which leave the
interpreter lock free, all sequences in one batch. On a GPU the local copy runs beside the update (``trainer.device=cuda``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from verl_vs_native import chosen_sides, median_after_first, run_training, show

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
ENGINE_CORES = max(1, CORES // 2)  # the process engine's default share
SIDES = {
    "sync": ["rollout.mode=sync", "rollout.engine=local"],
    "async": ["rollout.mode=async", "rollout.engine=local"],
    "async-process": ["rollout.mode=async", "rollout.engine=process"],
    # The cores split between the two processes instead of both using every core.
    "async-process-split": [
        "rollout.mode=async",
        "rollout.engine=process",
        f"rollout.engine_threads={ENGINE_CORES}",
        f"trainer.cpu_threads={max(1, CORES - ENGINE_CORES)}",
    ],
    "sync-llamacpp": ["rollout.mode=sync", "rollout.engine=llamacpp"],
    "async-llamacpp": ["rollout.mode=async", "rollout.engine=llamacpp"],
    # llama.cpp on its share of the cores, the update on the rest.
    "async-llamacpp-split": [
        "rollout.mode=async",
        "rollout.engine=llamacpp",
        f"rollout.engine_threads={ENGINE_CORES}",
        f"trainer.cpu_threads={max(1, CORES - ENGINE_CORES)}",
    ],
    # vLLM splits the cores itself in async mode (half each) and takes them all in sync mode.
    "sync-vllm": ["rollout.mode=sync", "rollout.engine=vllm"],
    "async-vllm": ["rollout.mode=async", "rollout.engine=vllm"],
}
DEFAULT_SIDES = ("sync", "async", "async-process", "sync-llamacpp", "async-llamacpp")


def run_side(side: str, output: Path, args: argparse.Namespace) -> tuple[list[dict], float]:
    command = [
        sys.executable, "-m", "rllm_train.cli", "--model", args.model,
        "--steps", str(args.steps), "--seed", str(args.seed), "--output", str(output),
        "--no-progress", *(["--env", args.env] if args.env else []),
        "trainer.validate_held_out=false", "trainer.save_every=0", "trainer.tensorboard=false",
        f"trainer.lr={args.lr}", *args.overrides, *SIDES[side],
    ]  # fmt: skip
    timeout = args.side_timeout or None
    return run_training(side, command, output, timeout=timeout, keep_going=bool(timeout))


def elapsed(rows: list[dict]) -> list[float]:
    """The training loop's wall time at the end of each step."""
    total, points = 0.0, []
    for row in rows:
        total += row["time/step_s"]
        points.append(total)
    return points


def time_to_target(rows: list[dict], target: float, window: int = 3) -> float | None:
    """Wall time at which the mean reward of the last `window` steps first reached `target`."""
    times = elapsed(rows)
    rewards = [row["reward_mean"] for row in rows]
    for end in range(window, len(rows) + 1):
        if statistics.fmean(rewards[end - window : end]) >= target:
            return times[end - 1]
    return None


def summary(rows: list[dict], target: float) -> dict[str, float | None]:
    # Leaving out the first step, which pays for warm-up on every side, and (given enough
    # steps) the last, whose update has no next step to overlap in the asynchronous modes.
    timed = rows[1:-1] if len(rows) >= 4 else rows[1:] or rows
    episodes = sum(row["episodes"] for row in timed)
    loop_seconds = sum(row["time/step_s"] for row in timed)
    last = rows[-3:]
    return {
        "samples/s": episodes / loop_seconds,
        "step s": median_after_first(rows, "time/step_s"),
        "wait s": median_after_first(rows, "time/rollout_s"),
        "update s": median_after_first(rows, "time/update_s"),
        "gap": median_after_first(rows, "rollout_corr/logprob_gap_mean"),
        "staleness": median_after_first(rows, "rollout_corr/staleness_mean"),
        "reward end": statistics.fmean(row["reward_mean"] for row in last),
        "to target s": time_to_target(rows, target),
    }


def print_steps(results: dict[str, list[dict]]) -> None:
    print("\nreward (step time s) per step")
    for side, rows in results.items():
        cells = " ".join(f"{row['reward_mean']:.2f}({row['time/step_s']:.1f})" for row in rows)
        print(f"  {side:<20} {cells}")


def print_summary(summaries: dict[str, dict], target: float) -> None:
    columns = list(next(iter(summaries.values())))
    print(f"\n{'side':<20}" + "".join(f"{name:>12}" for name in columns) + f"{'x samples/s':>13}")
    first = next(iter(summaries.values()))["samples/s"]
    for side, values in summaries.items():
        cells = "".join(f"{show(values[name]):>12}" for name in columns)
        print(f"{side:<20}{cells}{values['samples/s'] / first:>12.2f}x")
    print(
        f"(step/wait/update s: medians after the first step; gap: mean |engine - trainer| "
        f"log-prob per token; to target s: loop time until the 3-step mean reward >= {target})"
    )


def plot(results: dict[str, list[dict]], title: str, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6, 3.5), dpi=110)
    for side, rows in results.items():
        axes.plot(elapsed(rows), [row["reward_mean"] for row in rows], marker=".", label=side)
    axes.set_xlabel("training loop wall time (s)")
    axes.set_ylabel("mean reward")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png)
    print(f"\nreward against wall time: {png}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", default=",".join(DEFAULT_SIDES))
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--env", default="")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--target", type=float, default=0.6, help="reward the sides race to")
    parser.add_argument("--png", default="async_training.png")
    parser.add_argument(
        "--side-timeout",
        type=float,
        default=0,
        help="seconds per side (0: none); a side that fails or runs out is reported with the "
        "steps it finished, and the others go on",
    )
    parser.add_argument("overrides", nargs="*", help="section.key=value, given to every side")
    args = parser.parse_args()
    sides = chosen_sides(args.sides, SIDES)
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="rllm-async-bench-") as folder:
        for side in sides:
            rows, seconds = run_side(side, Path(folder) / side, args)
            results[side] = rows
            print(f"{side}: {len(rows)} steps in {seconds:.0f} s (process, start-up included)")
            if len(rows) >= 2:  # printed now too: a run cut short keeps the sides it finished
                values = summary(rows, args.target)
                print("  " + ", ".join(f"{name} {show(value)}" for name, value in values.items()))
    results = {side: rows for side, rows in results.items() if len(rows) >= 2}
    if not results:
        sys.exit("no side finished two steps")
    print_steps(results)
    print_summary({side: summary(rows, args.target) for side, rows in results.items()}, args.target)
    title = f"{args.model} on {args.env or 'the default task'}"
    if args.overrides:  # a task changed by overrides is not the one the env id names
        title += "\n" + textwrap.fill(textwrap.shorten(" ".join(args.overrides), 240), 80)
    plot(results, title, Path(args.png))


if __name__ == "__main__":
    main()
