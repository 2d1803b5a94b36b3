"""The native backend and verl's own trainer, side by side: same env, model, seed and algorithm.

Both sides run ``rllm-train`` as a user does, one after the other on the same machine, with the
same config and overrides; only ``--backend`` differs. Printed per step for each side: mean
reward, step time, its rollout / update split, and (verl) the gap between the rollout engine's
log-probs and the trainer's after weight sync; then medians over the steps after the first (the
first pays for warm-up) and the ratio verl / native. The reward curves of both go into one PNG.

    python benchmarks/verl_vs_native.py                      # the embedded default (SmolLM2)
    python benchmarks/verl_vs_native.py --steps 4 --model tiny rollout.tasks_per_step=2

On a machine without a GPU the verl side runs in rllm's CPU mode (FSDP2 on gloo, rllm's
LocalEngine as the rollout): the same sampler as the native side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BACKENDS = ("native", "verl")
COLUMNS = (("reward_mean", "reward"), ("time/step_s", "step s"), ("time/rollout_s", "rollout s"),
           ("time/update_s", "update s"), ("logprob_gap_max", "logprob gap"))  # fmt: skip


def run_backend(backend: str, output: Path, args: argparse.Namespace) -> tuple[list[dict], float]:
    command = [
        sys.executable, "-m", "rllm_train.cli", "--backend", backend, "--model", args.model,
        "--steps", str(args.steps), "--seed", str(args.seed), "--output", str(output),
        "--no-progress", *(["--env", args.env] if args.env else []),
        "trainer.validate_held_out=false", "trainer.save_every=0", *args.overrides,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{backend} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "reward_mean" in row], seconds


def median_after_first(rows: list[dict], key: str) -> float | None:
    values = [row[key] for row in rows[1:] if isinstance(row.get(key), (int, float))]
    return statistics.median(values) if values else None


def show(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if abs(value) < 1e-3 and value else f"{value:.3f}"


def plot(results: dict[str, list[dict]], title: str, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6, 3.5), dpi=110)
    for backend, rows in results.items():
        steps = [row["step"] for row in rows]
        axes.plot(steps, [row["reward_mean"] for row in rows], marker="o", ms=3, label=backend)
    axes.set_xlabel("step")
    axes.set_ylabel("mean train reward")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png)
    pyplot.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--env", default=None, help="default: rllm-train's default task")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=None, help="PNG of both reward curves")
    parser.add_argument("overrides", nargs="*", help="rllm-train section.key=value, both sides")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="verl-vs-native-"))
    results, totals = {}, {}
    for backend in BACKENDS:
        results[backend], totals[backend] = run_backend(backend, root / backend, args)

    print(f"model {args.model}, env {args.env or 'default'}, {args.steps} steps, seed {args.seed},"
          f" overrides {args.overrides or 'none'}; runs in {root}")  # fmt: skip
    header = "step | " + " | ".join(f"{b} {label}" for _, label in COLUMNS for b in BACKENDS)
    print(header)
    for index in range(args.steps):
        cells = []
        for key, _ in COLUMNS:
            for backend in BACKENDS:
                rows = results[backend]
                cells.append(show(rows[index].get(key)) if index < len(rows) else "-")
        print(f"{index + 1} | " + " | ".join(cells))
    print("medians over steps 2.. (ratio verl / native):")
    for key, label in COLUMNS:
        native, verl = (median_after_first(results[b], key) for b in BACKENDS)
        ratio = f"{verl / native:.2f}x" if native and verl is not None else "-"
        print(f"  {label:12s} native {show(native):>9s}  verl {show(verl):>9s}  {ratio}")
    for backend in BACKENDS:
        rows = results[backend]
        print(f"  {backend}: whole run {totals[backend]:.1f} s (start-up included); reward "
              f"{rows[0]['reward_mean']:.3f} (step 1) -> {rows[-1]['reward_mean']:.3f} "
              f"(step {rows[-1]['step']}), best {max(r['reward_mean'] for r in rows):.3f}")  # fmt: skip
    if args.plot:
        plot(results, f"{args.model}: native vs verl (same config, seed {args.seed})", args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
