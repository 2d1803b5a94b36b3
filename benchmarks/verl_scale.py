"""What one more training process or rollout replica costs a verl run, side by side.

Every side is ``rllm-train --backend verl`` with the same config, model, env and seed; only the
layout differs:

    1p-1r     1 training process, 1 rollout replica (verl's synchronous trainer)
    2p-2r     2 training processes (FSDP2 over 2 ranks), 2 replicas, one beside each
    osf-1r    verl's one-step-off trainer: 1 training process, 1 rollout process apart
    osf-2r    the same with 2 rollout replicas apart

(2 training processes sharing 1 replica, ``verl.tensor_parallel_size=2``, needs GPUs: on a CPU
every replica is one LocalEngine.) On a machine without GPUs each process is a CPU process sharing the same cores, so more of them
cannot be faster here: what the table shows is the coordination each one adds (gloo
collectives, the sharded update, weight sync to every replica, load balancing) - what a cluster
user pays for the parallelism a GPU cluster gives back. Printed per side: median step time and
its rollout / update / weight-sync split over the steps after the first (the first pays for
warm-up), the whole command's wall time (start-up included), and each ratio to the first side.

    python benchmarks/verl_scale.py                         # every side, 6 steps, tiny model
    python benchmarks/verl_scale.py --sides 1p-1r,2p-2r --steps 4
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from verl_vs_native import chosen_sides, median_after_first, run_training, show

REPO_ROOT = Path(__file__).resolve().parents[1]
SIDES: dict[str, tuple[str, ...]] = {
    "1p-1r": ("verl.n_gpus_per_node=1",),
    "2p-2r": ("verl.n_gpus_per_node=2",),
    "osf-1r": ("verl.mode=one_step_off", "verl.rollout_gpus_per_node=1"),
    "osf-2r": ("verl.mode=one_step_off", "verl.rollout_gpus_per_node=2"),
}
COLUMNS = (("time/step_s", "step s"), ("time/rollout_s", "rollout s"),
           ("time/update_s", "update s"), ("time/weight_sync_s", "sync s"))  # fmt: skip
# A multi-turn env whose tiny-model samples differ in reward, so every update has a gradient.
ENV = "tests.train.reply_length:rllm_test/LakeReplyLength-v0"


def side_command(side: str, output: Path, args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "rllm_train.cli", "--backend", "verl", "--env", args.env,
        "--model", args.model, "--steps", str(args.steps), "--seed", str(args.seed),
        "--output", str(output), "--no-progress", "trainer.validate_held_out=false",
        "trainer.save_every=0", "model.lora_rank=0", "rollout.tasks_per_step=4", "rollout.n=2",
        "rollout.max_turns=2", "rollout.max_response_tokens=16", "verl.agent_workers=1",
        "trainer.micro_batch_size=2",  # each of 2 processes' 4 samples: 2 micro-batches
        *SIDES[side], *args.overrides,
    ]  # fmt: skip


def ratio(value: float | None, reference: float | None) -> str:
    return f" ({value / reference:.2f}x)" if value and reference else ""


def print_results(results: dict[str, tuple[list[dict], float]], sides: list[str]) -> None:
    base = sides[0]
    print(f"medians over steps 2.. and the whole command (ratio to {base}):")
    header = ["side", *(label for _, label in COLUMNS), "command s"]
    print(" | ".join(header))
    for side in sides:
        rows, seconds = results[side]
        cells = [side]
        for key, _ in COLUMNS:
            value = median_after_first(rows, key)
            cells.append(show(value) + ratio(value, median_after_first(results[base][0], key)))
        cells.append(f"{seconds:.0f}{ratio(seconds, results[base][1])}")
        print(" | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--env", default=ENV)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sides", default=",".join(SIDES), help="comma-separated: " + ", ".join(SIDES)
    )
    parser.add_argument("overrides", nargs="*", help="rllm-train section.key=value, every side")
    args = parser.parse_args()
    sides = chosen_sides(args.sides, SIDES)
    # The default env is defined in the repository's tests package: importable from any folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="verl-scale-") as root:
        for side in sides:
            command = side_command(side, Path(root) / side, args)
            rows, seconds = run_training(side, command, Path(root) / side)
            results[side] = (rows, seconds)
            print(f"{side}: {len(rows)} steps in {seconds:.0f} s", flush=True)
    print_results(results, sides)


if __name__ == "__main__":
    main()
