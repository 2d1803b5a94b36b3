"""The native backend and verl's own trainer, side by side: same env, model, seed and algorithm.

Every side runs ``rllm-train`` as a user does, one after the other on the same machine, with the
same config and overrides; only ``--backend`` (and, for verl, ``verl.mode``) differs. Printed per
step for each side: mean reward, step time, its rollout / update split, and (verl) the gap between
the rollout engine's log-probs and the trainer's after weight sync; then medians over the steps
after the first (the first pays for warm-up) and the ratio of each side to the first. The reward
curves of all sides go into one PNG.

    python benchmarks/verl_vs_native.py                      # the embedded default (SmolLM2)
    python benchmarks/verl_vs_native.py --steps 4 --model tiny rollout.tasks_per_step=2
    python benchmarks/verl_vs_native.py --sides verl,verl:one_step_off,verl:fully_async

A side is a backend, or ``verl:<mode>`` for one of verl's schedules (sync, one_step_off,
fully_async). In the asynchronous modes rollout overlaps training, so "step s" is the wall time
from one batch to the next and "rollout s" only the part of it spent waiting for a batch. On a
machine without a GPU verl runs in rllm's CPU mode (FSDP2 on gloo, rllm's LocalEngine as the
rollout): the same sampler as the native side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_SIDES = ("native", "verl")
COLUMNS = (("reward_mean", "reward"), ("time/step_s", "step s"), ("time/rollout_s", "rollout s"),
           ("time/update_s", "update s"), ("prob_gap_max", "prob gap"))  # fmt: skip


def side_arguments(side: str) -> tuple[str, list[str]]:
    """(backend, its extra overrides) for a side named ``native``, ``verl`` or ``verl:<mode>``."""
    backend, _, mode = side.partition(":")
    if backend not in ("native", "verl") or (mode and backend != "verl"):
        sys.exit(f"side {side!r}: expected native, verl or verl:<mode>")
    return backend, [f"verl.mode={mode}"] if mode else []


def run_side(side: str, output: Path, args: argparse.Namespace) -> tuple[list[dict], float]:
    backend, side_overrides = side_arguments(side)
    command = [
        sys.executable, "-m", "rllm_train.cli", "--backend", backend, "--model", args.model,
        "--steps", str(args.steps), "--seed", str(args.seed), "--output", str(output),
        "--no-progress", *(["--env", args.env] if args.env else []),
        "trainer.validate_held_out=false", "trainer.save_every=0", *args.overrides,
        *side_overrides,
    ]  # fmt: skip
    return run_training(side, command, output)


def run_training(
    side: str,
    command: list[str],
    output: Path,
    *,
    timeout: float | None = None,
    keep_going: bool = False,
) -> tuple[list[dict], float]:
    """Run one ``rllm-train`` command writing to `output`: its step rows and wall seconds.

    A side that fails or outlasts `timeout` seconds ends the benchmark, unless `keep_going`:
    then it is reported and the steps it finished (``metrics.jsonl`` is written step by step)
    are kept, so one broken side on a borrowed machine does not cost the others' figures."""
    started = time.perf_counter()
    # A session of its own, so that a side stopped at its timeout goes with its engine children;
    # stderr in a file, not a pipe, which a child left behind would hold open.
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
        try:
            process.wait(timeout=timeout)
            stopped = ""
        except subprocess.TimeoutExpired:
            stop_group(process)
            stopped = f"stopped after its {timeout:.0f} s"
        with contextlib.suppress(ProcessLookupError):  # what it left behind, before the next side
            os.killpg(process.pid, signal.SIGKILL)
        stderr.seek(0)
        tail = stderr.read()[-4000:]
    seconds = time.perf_counter() - started
    failure = stopped or (f"failed ({process.returncode})" if process.returncode else "")
    if failure and not keep_going:
        sys.exit(f"{side} {failure}:\n{tail}")
    if failure:
        print(f"{side} {failure}:\n{tail}", file=sys.stderr)
    return [row for row in read_rows(output / "metrics.jsonl") if "reward_mean" in row], seconds


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the side's process group (the trainer closes its engines), SIGKILL if it lingers."""
    for sent, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sent)
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def chosen_sides(text: str, known) -> list[str]:
    """The comma-separated sides of `text`, or exit naming the unknown ones and the choices."""
    sides = [side.strip() for side in text.split(",") if side.strip()]
    unknown = [side for side in sides if side not in known]
    if unknown:
        sys.exit(f"unknown sides {unknown}: choose from {', '.join(known)}")
    return sides


def read_rows(metrics: Path) -> list[dict]:
    """The rows of a metrics file; a last line cut short by a kill is left out."""
    rows = []
    for line in metrics.read_text().splitlines() if metrics.is_file() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


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
    for side, rows in results.items():
        steps = [row["step"] for row in rows]
        axes.plot(steps, [row["reward_mean"] for row in rows], marker="o", ms=3, label=side)
    axes.set_xlabel("step")
    axes.set_ylabel("mean train reward")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png)
    pyplot.close(figure)


def print_table(results: dict[str, list[dict]], sides: list[str], steps: int) -> None:
    print("step | " + " | ".join(f"{side} {label}" for _, label in COLUMNS for side in sides))
    for index in range(steps):
        cells = []
        for key, _ in COLUMNS:
            for side in sides:
                rows = results[side]
                cells.append(show(rows[index].get(key)) if index < len(rows) else "-")
        print(f"{index + 1} | " + " | ".join(cells))


def print_medians(results: dict[str, list[dict]], sides: list[str]) -> None:
    base = sides[0]
    print(f"medians over steps 2.. (ratio to {base}):")
    for key, label in COLUMNS:
        medians = {side: median_after_first(results[side], key) for side in sides}
        cells = []
        for side in sides:
            value, reference = medians[side], medians[base]
            ratio = f" ({value / reference:.2f}x)" if side != base and reference and value else ""
            cells.append(f"{side} {show(value)}{ratio}")
        print(f"  {label:12s} " + "  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--env", default=None, help="default: rllm-train's default task")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sides",
        default=",".join(DEFAULT_SIDES),
        help="comma-separated: native, verl, verl:<mode>",
    )
    parser.add_argument("--plot", type=Path, default=None, help="PNG of the reward curves")
    parser.add_argument("overrides", nargs="*", help="rllm-train section.key=value, every side")
    args = parser.parse_args()
    sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    for side in sides:
        side_arguments(side)  # a misspelt side fails before the first run, not after it

    root = Path(tempfile.mkdtemp(prefix="verl-vs-native-"))
    results, totals = {}, {}
    for side in sides:
        results[side], totals[side] = run_side(side, root / side.replace(":", "-"), args)

    print(f"model {args.model}, env {args.env or 'default'}, {args.steps} steps, seed {args.seed},"
          f" overrides {args.overrides or 'none'}; runs in {root}")  # fmt: skip
    print_table(results, sides, args.steps)
    print_medians(results, sides)
    for side in sides:
        rows = results[side]
        print(f"  {side}: whole run {totals[side]:.1f} s (start-up included); reward "
              f"{rows[0]['reward_mean']:.3f} (step 1) -> {rows[-1]['reward_mean']:.3f} "
              f"(step {rows[-1]['step']}), best {max(r['reward_mean'] for r in rows):.3f}")  # fmt: skip
    if args.plot:
        title = f"{args.model}: {' vs '.join(sides)} (same config, seed {args.seed})"
        plot(results, title, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
