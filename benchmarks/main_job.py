"""The main job's setup, chosen by measurement: held-out gain per minute of each engine, mode
and method on the same task, seed and steps, side by side on one machine.

Each side runs ``rllm-train`` as a user does (the embedded default: SmolLM2-135M-Instruct on
``rllm/RunningTotal-v0``), one after the other; only these settings differ, and each method
trains at the learning rate rllm-train gives it (2e-5 full, 1e-3 LoRA):

    default                rllm-train with no arguments (its engine, mode and method)
    sync-local-full        transformers generates, then the whole model is updated (AdamW)
    sync-local-lora        the same with a rank-16 LoRA on q/k/v/o
    sync-llamacpp-full     llama.cpp generates (an F16 export after each update)
    sync-llamacpp-lora     the same with the LoRA (merged into each export)
    async-llamacpp-full    llama.cpp plays the next step while this one's update runs
    async-llamacpp-lora    the same with the LoRA
    async-process-full     a synced copy in a process of its own plays ahead

Printed per side: held-out greedy reward before and after (the run's own validation, on tasks
never trained on), the gain, the wall time of the whole command (start-up, validation and
checkpoints included: what a user waits for) and the gain per minute of it; then each side's
gain per minute as a ratio to the first side's. Several seeds (``--seeds 0,1,2``) give one row
per side and seed, and the mean.

    python benchmarks/main_job.py                                   # every side, seed 0
    python benchmarks/main_job.py --sides sync-local-full,async-llamacpp-full --seeds 0,1,2
    python benchmarks/main_job.py --model tiny --steps 2 --sides sync-local-full  # smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from verl_vs_native import chosen_sides, run_training

# Each method at the learning rate rllm-train gives it when none is named (trainer.lr=0).
LORA = ["model.lora_rank=16", "model.lora_target_modules=[q_proj,k_proj,v_proj,o_proj]"]
FULL = ["model.lora_rank=0"]
SIDES = {
    "default": [],  # rllm-train with no arguments, whatever it resolves to
    "sync-local-full": ["rollout.mode=sync", "rollout.engine=local", *FULL],
    "sync-local-lora": ["rollout.mode=sync", "rollout.engine=local", *LORA],
    "sync-llamacpp-full": ["rollout.mode=sync", "rollout.engine=llamacpp", *FULL],
    "sync-llamacpp-lora": ["rollout.mode=sync", "rollout.engine=llamacpp", *LORA],
    "async-llamacpp-full": ["rollout.mode=async", "rollout.engine=llamacpp", *FULL],
    "async-llamacpp-lora": ["rollout.mode=async", "rollout.engine=llamacpp", *LORA],
    "async-process-full": ["rollout.mode=async", "rollout.engine=process", *FULL],
}


def run_side(side: str, seed: int, output: Path, args: argparse.Namespace) -> dict:
    command = [
        sys.executable, "-m", "rllm_train.cli", "--model", args.model,
        "--steps", str(args.steps), "--seed", str(seed), "--output", str(output),
        "--no-progress", "trainer.save_every=0", "trainer.tensorboard=false",
        *args.overrides, *SIDES[side],
    ]  # fmt: skip
    rows, seconds = run_training(side, command, output, timeout=args.side_timeout or None)
    summary = json.loads((output / "summary.json").read_text()) if rows else {}
    before, after = summary.get("val_reward_first"), summary.get("val_reward_last")
    gain = None if before is None or after is None else after - before
    return {
        "side": side,
        "seed": seed,
        "steps": len(rows),
        "held-out before": before,
        "held-out after": after,
        "gain": gain,
        "wall s": seconds,
        "gain/min": None if gain is None else gain / (seconds / 60),
    }


def show(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def print_table(results: list[dict]) -> None:
    columns = list(results[0])
    print("\n| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in results:
        print("| " + " | ".join(show(row[column]) for column in columns) + " |")


def print_means(results: list[dict]) -> None:
    sides = list(dict.fromkeys(row["side"] for row in results))
    means = {}
    for side in sides:
        rows = [row for row in results if row["side"] == side and row["gain"] is not None]
        if rows:
            means[side] = {
                key: statistics.fmean(row[key] for row in rows)
                for key in ("held-out before", "held-out after", "gain", "wall s", "gain/min")
            }
    if not means:
        return
    first = next(iter(means.values()))["gain/min"]
    print("\nmean over seeds; gain/min against the first side")
    for side, mean in means.items():
        ratio = f"{mean['gain/min'] / first:.2f}x" if first else "-"
        cells = ", ".join(f"{key} {value:.3f}" for key, value in mean.items())
        print(f"  {side:<22} {cells}, {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--side-timeout", type=float, default=0, help="seconds (0: none)")
    parser.add_argument(
        "--keep", default="", help="a folder to keep the runs in (curves, episodes)"
    )
    parser.add_argument("overrides", nargs="*", help="section.key=value, given to every side")
    args = parser.parse_args()
    sides = chosen_sides(args.sides, SIDES)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="rllm-main-job-") as scratch:
        folder = args.keep or scratch
        for seed in seeds:
            for side in sides:
                result = run_side(side, seed, Path(folder) / f"{side}-{seed}", args)
                print(", ".join(f"{key} {show(value)}" for key, value in result.items()))
                results.append(result)
    print_table(results)
    print_means(results)


if __name__ == "__main__":
    main()
