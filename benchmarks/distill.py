"""On-policy distillation against GRPO against both mixed: held-out reward per minute of training.

The teacher is the embedded model after the demo's training: ``rllm-train`` (GRPO on
``rllm/RunningTotal-v0``, the embedded default's settings) for ``--teacher-steps`` steps, or a run
given with ``--teacher RUN`` (any ``distill.teacher``: a run folder, e.g. a LoRA-trained one, or a
model). The student is the base model. Three sides then run ``rllm-train`` as a user does, one
after the other, with the same seed, steps, tasks and validation; only the algorithm differs:

    distill   --algorithm distill --teacher TEACHER      (the teacher's log-probs alone)
    grpo      --algorithm grpo                           (the env's reward alone)
    mixed     --algorithm grpo --teacher TEACHER distill.weight=W   (both)

Every side validates on the held-out tasks (``running_total:test``) before its first step,
every ``--val-every`` steps and after its last: greedily, and ``--val-n`` samples per task at
temperature 1 (``val/pass@1``). Printed per side: both held-out rewards, first and last, and what
each gained per minute of training (the steps' wall time: start-up and validation left out),
``distill/kl`` (the per-token reverse KL to the teacher, first and last step), the teacher's
scoring time per step and the median step time; then the greedy held-out reward at each
validation. The held-out rewards against training minutes of every side go into one PNG;
``--json`` writes the figures.

    python benchmarks/distill.py                          # the embedded model, 2-core defaults
    python benchmarks/distill.py --teacher runs/rl        # reuse a trained run as the teacher
    python benchmarks/distill.py --tiny                   # a smoke run on the tiny model

``--tiny`` runs every phase at the smallest size on the random tiny model. That model answers
no total right, so GRPO would leave it as it is; its teacher is instead the tiny model after a
step of distillation toward the embedded SmolLM2 (the same tokenizer), so the sides have a
teacher that differs from their student. Its figures say nothing about the methods.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from verl_vs_native import read_rows, run_training

ENV = "rllm/RunningTotal-v0"  # the embedded default: a running total over three turns
SIDES: dict[str, list[str]] = {
    "distill": ["--algorithm", "distill", "--teacher", "{teacher}"],
    "grpo": ["--algorithm", "grpo"],
    "mixed": ["--algorithm", "grpo", "--teacher", "{teacher}", "distill.weight={weight}"],
}
# The task as the embedded default plays it, stated so that a change of the default does not
# change the benchmark.
TASK = [f"--env={ENV}", "rollout.max_turns=3", "rollout.max_response_tokens=12"]
TINY = {
    "model": "tiny",
    "steps": 2,
    "teacher_steps": 1,
    "val_every": 1,
    "val_n": 2,
    "overrides": [
        "rollout.tasks_per_step=2",
        "rollout.n=2",
        "rollout.max_response_tokens=4",
        "trainer.val_tasks=4",
        "trainer.lr=1e-3",
    ],
}


def train(name: str, output: Path, args: argparse.Namespace, extra: list[str]) -> list[dict]:
    """One ``rllm-train`` run into `output`; every row of its metrics (validation rows too)."""
    command = [
        sys.executable, "-m", "rllm_train.cli", "--model", args.model, "--seed", str(args.seed),
        "--output", str(output), "--no-progress", *TASK, "trainer.save_every=0",
        "trainer.tensorboard=false", *args.overrides, *extra,
    ]  # fmt: skip
    run_training(name, command, output)
    return read_rows(output / "metrics.jsonl")


def train_teacher(output: Path, args: argparse.Namespace) -> str:
    """The teacher's run folder: the demo's training of the model (GRPO), or with --tiny a step
    of distillation toward SmolLM2 (see the module doc)."""
    extra = ["--steps", str(args.teacher_steps)]
    if args.tiny:
        extra += ["--algorithm", "distill", "--teacher", "smollm2"]
    rows = train("teacher", output, args, extra)
    validated = [row["val/reward_mean"] for row in rows if "val/reward_mean" in row]
    if validated:
        print(f"teacher: held-out reward {validated[0]:.3f} -> {validated[-1]:.3f} ({output})")
    return str(output)


def curve(rows: list[dict], key: str) -> list[tuple[float, float]]:
    """(training minutes so far, the row's `key`) at every row that has it."""
    minutes, points = 0.0, []
    for row in rows:
        minutes += row.get("time/step_s", 0.0) / 60
        if key in row:
            points.append((round(minutes, 4), row[key]))
    return points


def gain_per_minute(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def side_figures(rows: list[dict]) -> dict:
    """What a side's metrics say: held-out reward (greedy, and sampled with --val-n) against
    training minutes, and the rest."""
    greedy, sampled = curve(rows, "val/reward_mean"), curve(rows, "val/pass@1")
    steps = [row for row in rows if "reward_mean" in row]
    kl = [row["distill/kl"] for row in steps if "distill/kl" in row]
    teacher_s = [row["time/teacher_s"] for row in steps if "time/teacher_s" in row]
    return {
        "validations": greedy,
        "sampled_validations": sampled,
        "train_minutes": sum(row.get("time/step_s", 0.0) for row in rows) / 60,
        "held_out_first": greedy[0][1] if greedy else None,
        "held_out_last": greedy[-1][1] if greedy else None,
        "held_out_gain_per_minute": gain_per_minute(greedy),
        "sampled_first": sampled[0][1] if sampled else None,
        "sampled_last": sampled[-1][1] if sampled else None,
        "sampled_gain_per_minute": gain_per_minute(sampled),
        "train_reward_mean": mean([row["reward_mean"] for row in steps]),
        "distill_kl_first": kl[0] if kl else None,
        "distill_kl_last": kl[-1] if kl else None,
        "teacher_s_per_step": mean(teacher_s),
        "step_s_median": statistics.median(row["time/step_s"] for row in steps) if steps else None,
    }


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def show(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


COLUMNS = (  # (figure, heading, digits)
    ("held_out_first", "greedy first", 3),
    ("held_out_last", "last", 3),
    ("held_out_gain_per_minute", "gain/min", 3),
    ("sampled_first", "sampled first", 3),
    ("sampled_last", "last", 3),
    ("sampled_gain_per_minute", "gain/min", 3),
    ("train_minutes", "minutes", 2),
    ("distill_kl_first", "kl first", 3),
    ("distill_kl_last", "kl last", 3),
    ("teacher_s_per_step", "teacher s", 2),
    ("step_s_median", "step s", 2),
)


def print_table(figures: dict[str, dict]) -> None:
    print("\n" + f"{'side':<8}" + "".join(f" {heading:>13}" for _, heading, _ in COLUMNS))
    for side, row in figures.items():
        cells = "".join(f" {show(row[key], digits):>13}" for key, _, digits in COLUMNS)
        print(f"{side:<8}{cells}")
    for side, row in figures.items():
        points = row["validations"]
        line = ", ".join(f"{reward:.3f} @ {minutes:.2f} min" for minutes, reward in points)
        print(f"{side}: held-out reward (greedy) {line}")


def plot(figures: dict[str, dict], title: str, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6, 3.5), dpi=110, layout="tight")
    for side, row in figures.items():
        for key, style in (("validations", "-"), ("sampled_validations", ":")):
            if row[key]:
                minutes, rewards = zip(*row[key], strict=True)
                kind = "greedy" if key == "validations" else "sampled"
                axes.plot(minutes, rewards, style, marker="o", label=f"{side} ({kind})")
    axes.set(
        xlabel="training minutes (validation and start-up left out)",
        ylabel="held-out reward",
    )
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=8)
    figure.savefig(png)
    print(f"\nheld-out rewards against training minutes: {png}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="the student (and the teacher's base)")
    parser.add_argument("--teacher", default="", help="a teacher to reuse (else one is trained)")
    parser.add_argument("--teacher-steps", type=int, default=16, help="the teacher's GRPO steps")
    parser.add_argument("--steps", type=int, default=8, help="each side's training steps")
    parser.add_argument("--val-every", type=int, default=4, help="steps between validations")
    parser.add_argument(
        "--val-n", type=int, default=4, help="held-out samples per pair at temperature 1 (pass@1)"
    )
    parser.add_argument("--weight", type=float, default=1.0, help="mixed: distill.weight")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="", help="where the runs go (default: a temp dir)")
    parser.add_argument("--png", default="distill.png")
    parser.add_argument("--json", default="", help="write the figures here")
    parser.add_argument("--tiny", action="store_true", help="a smoke run on the tiny model")
    parser.add_argument("overrides", nargs="*", help="section.key=value for every run")
    args = parser.parse_args()
    if args.tiny:
        args.model, args.steps = TINY["model"], TINY["steps"]
        args.teacher_steps, args.val_every = TINY["teacher_steps"], TINY["val_every"]
        args.val_n = TINY["val_n"]
        args.overrides = [*TINY["overrides"], *args.overrides]
    unknown = [side for side in args.sides.split(",") if side not in SIDES]
    if unknown:
        parser.error(f"unknown sides {unknown}; choose from {', '.join(SIDES)}")
    return args


def main() -> None:
    args = parse_args()
    root = Path(args.output or tempfile.mkdtemp(prefix="distill-bench-"))
    teacher = args.teacher or train_teacher(root / "teacher", args)
    figures: dict[str, dict] = {}
    for side in args.sides.split(","):
        extra = [part.format(teacher=teacher, weight=args.weight) for part in SIDES[side]]
        extra += ["--steps", str(args.steps), f"trainer.val_every={args.val_every}"]
        extra += [f"rollout.val_n={args.val_n}"]
        figures[side] = side_figures(train(side, root / side, args, extra))
    print_table(figures)
    title = f"{args.model} on {ENV}: {args.steps} steps, seed {args.seed}, teacher {teacher}"
    plot(figures, title, Path(args.png))
    if args.json:
        report = {"model": args.model, "teacher": teacher, "steps": args.steps, "sides": figures}
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
