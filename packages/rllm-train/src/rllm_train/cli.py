"""``rllm-train``: train a language agent with RL on any Gymnasium-registered env.

With no arguments it runs the embedded default: SmolLM2-135M-Instruct learning to keep a
running total over three turns (rllm/RunningTotal-v0) on the CPU, with GRPO and a LoRA, llama.cpp
playing the episodes (see docs/training/native.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rllm_agents.cli.usage import (
    CommandParser,
    UsageError,
    one_line,
    positive_int,
    report_usage_error,
)
from rllm_agents.damaged_lines import settle_logs
from rllm_agents.run_folder import (
    RunFolderError,
    Terminated,
    claim_run_folder,
    report_full_disk,
    report_stop,
    terminate_on_signals,
)
from rllm_envs.core.loading import import_from_current_folder

from rllm_train.config import (
    ALGORITHMS,
    BACKENDS,
    CURRICULUM_KINDS,
    EXECUTORS,
    ConfigError,
    TrainConfig,
    build_config,
)
from rllm_train.run.backends import backend_module
from rllm_train.run.failures import RunStopped
from rllm_train.run.reporting import METRICS_FILE, RUN_MARKERS, run_summary, step_rows
from rllm_train.run.setup import setup_run

PROG = "rllm-train"

EPILOG = """\
overrides:
  Any config key as section.key=value, applied after --config and the flags, e.g.
    rllm-train rollout.n=8 trainer.lr=1e-5 env.kwargs.max_operand=20
  Sections and their keys (defaults: the embedded default run):
{keys}

examples:
  rllm-train                                       # the embedded default on the CPU
  rllm-train --env rllm/FrozenLake-v0 --model tiny --steps 5 rollout.max_turns=4
  rllm-train --env my_pkg.envs:my/Env-v0           # imports my_pkg.envs, which registers it
  rllm-train --env rllm/GymText-v0 env.kwargs.env_id=CartPole-v1
  rllm-train --output runs/a --resume              # continue a stopped or killed run
  rllm-train --output runs/a --resume --repair     # ... moving its damaged log lines aside
  rllm-train --executor ray --ray-address HEAD:6379 rollout.dispatch=async   # envs on Ray
  rllm-train --env kuhn_poker_v0 multiagent.seats.player_1=random   # vs a scripted player
  rllm-train --env tictactoe_v0 --algorithm rae rollout.n=1           # self-play, every seat
  rllm-train --env rllm/FrozenLake-v0 --curriculum plr    # tasks weighted by measured success
  rllm-train --env rllm/Math-v0 --agent-program examples/gateway/math_agent.py:run   # a program
  rllm-train --env rllm/Math-v0 --agent-cmd "python my_agent.py"      # a program as a command
  rllm-train --algorithm sft --data runs/eval --output runs/sft    # fine-tune on the best episodes
  rllm-train --init-from runs/sft --output runs/rl                 # then RL from that checkpoint
  rllm-train --algorithm distill --teacher runs/rl --output runs/kd   # distil a trained run
"""

# Command-line flag -> the config key it sets.
FLAG_KEYS: dict[str, str] = {
    "env": "env.id",
    "model": "model.name",
    "algorithm": "algorithm.name",
    "curriculum": "curriculum.kind",
    "backend": "trainer.backend",
    "steps": "trainer.steps",
    "output": "trainer.output",
    "device": "trainer.device",
    "seed": "trainer.seed",
    "executor": "rollout.executor",
    "ray_address": "rollout.ray_address",
}
# Flags given more than once, whose values form a list.
LIST_FLAG_KEYS: dict[str, str] = {"data": "sft.data"}
# Flags whose values are taken as given, not read as YAML: a command line may hold ": " or
# "#", which YAML would turn into a mapping or a comment.
VERBATIM_FLAG_KEYS: dict[str, str] = {
    "agent_program": "program.function",
    "agent_cmd": "program.command",
    "init_from": "model.init_from",
    "teacher": "distill.teacher",
}


def _key_listing() -> str:
    lines = []
    for section, values in TrainConfig().to_dict().items():
        keys = ", ".join(f"{key}={value!r}" for key, value in values.items())
        lines.append(f"    {section}: {keys}")
    return "\n".join(lines)


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[1],
        epilog=EPILOG.format(keys=_key_listing()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a YAML config (sections as below), or the name of a shipped one "
        "(e.g. referential-speaker)",
    )
    parser.add_argument(
        "--env",
        metavar="ID",
        help="Gymnasium env id; 'pkg.module:ns/Name-vN' imports pkg.module first",
    )
    parser.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="'smollm2' (default, shipped), 'tiny' (random, for tests) or a local HF model dir",
    )
    parser.add_argument("--algorithm", choices=ALGORITHMS, help="default grpo")
    parser.add_argument(
        "--curriculum",
        choices=CURRICULUM_KINDS,
        help="which training tasks a step plays: uniform (default) or weighted by measured "
        "success (docs/training/curriculum.md)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        help="native (CPU or one GPU, default) or verl (verl's trainer on GPU clusters, or in its "
        "CPU mode where there is no GPU; needs rllm-train[verl])",
    )
    parser.add_argument("--steps", type=positive_int, metavar="N", help="training steps")
    parser.add_argument("--output", metavar="DIR", help="run directory (metrics, checkpoints)")
    parser.add_argument("--device", metavar="DEV", help="auto, cpu or cuda[:N]")
    parser.add_argument("--seed", type=int, help="run seed (task order and sampling)")
    parser.add_argument("--resume", action="store_true", help="continue from DIR's last checkpoint")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="with --resume: move damaged lines of the run's metrics log to a .damaged file "
        "beside it and keep every whole row, instead of stopping (docs/training/native.md)",
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        help="where episodes run: inline (this process, default) or ray (a Ray cluster's workers)",
    )
    parser.add_argument(
        "--ray-address", metavar="HOST:PORT", help="the Ray cluster (--executor ray)"
    )
    program = parser.add_mutually_exclusive_group()
    program.add_argument(
        "--agent-program",
        metavar="MODULE:FUNCTION",
        help="train an agent program: async def run(task, base_url, api_key) -> reward | dict, "
        "as module:function or path/to/file.py:function (docs/agents/gateway.md)",
    )
    program.add_argument(
        "--agent-cmd",
        metavar="COMMAND",
        help="train an agent program run as a command (task as JSON on stdin, endpoint in "
        "OPENAI_BASE_URL / OPENAI_API_KEY; its last stdout line is the answer the env grades, "
        'or a JSON object such as {"reward": 1.0})',
    )
    parser.add_argument(
        "--data",
        action="append",
        metavar="RUN|FILE",
        help="--algorithm sft: recorded episodes to fine-tune on: an rllm-eval --output folder, "
        "an rllm-train one with saved episodes (trainer.save_episodes) or an episodes file "
        "(repeatable)",
    )
    parser.add_argument(
        "--init-from",
        metavar="RUN|CHECKPOINT",
        help="start from a checkpoint's weights (a run's output dir, e.g. an sft run's), not "
        "the model's own; the optimizer and step count start afresh",
    )
    parser.add_argument(
        "--teacher",
        metavar="NAME|PATH|RUN",
        help="on-policy distillation: a teacher that scores every token the student generates "
        "(--algorithm distill, or added to an RL algorithm's advantages at distill.weight); a "
        "model --model accepts or a run folder, served by distill.engine: local (default), "
        "process, vllm, llamacpp, or openai at distill.base_url (docs/training/distill.md)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check and print the config, then stop (--backend verl: the verl trainer config "
        "composed from it and the data layout)",
    )
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    overrides = [
        f"{key}={getattr(args, flag)}"
        for flag, key in FLAG_KEYS.items()
        if getattr(args, flag) is not None
    ]
    if args.resume:
        overrides.append("trainer.resume=true")
    if args.no_progress:
        overrides.append("trainer.progress=false")
    verbatim = [
        (key, getattr(args, flag))
        for flag, key in {**VERBATIM_FLAG_KEYS, **LIST_FLAG_KEYS}.items()
        if getattr(args, flag) is not None
    ]
    return build_config(args.config, [*overrides, *verbatim, *args.overrides])


def report(config: TrainConfig, every_row: list[dict]) -> None:
    """The run in a line or two: the reward from first to last step, or the fine-tuning loss."""
    rows = step_rows(every_row)
    summary = run_summary(every_row)
    output = config.trainer.output
    if "sft_probe_loss_first" in summary:  # the recorded rewards say nothing new: the loss does
        print(
            f"{PROG}: {len(rows)} fine-tuning steps on {summary['sft_sequences']} sequences; "
            f"loss on them {summary['sft_probe_loss_first']:.3f} -> "
            f"{summary['sft_probe_loss_last']:.3f}; checkpoint in {output}/checkpoints "
            f"(rllm-train --init-from {output} ... starts RL from it)"
        )
    elif rows:
        first, last = rows[0], rows[-1]
        print(
            f"{PROG}: {len(rows)} steps; reward {first['reward_mean']:.3f} (step "
            f"{first['step']}) -> {last['reward_mean']:.3f} (step {last['step']}); "
            f"metrics in {output}/{METRICS_FILE}"
        )
    show_validation(Path(output))
    show_final_model(Path(output), config.env.id)
    if "val_reward_first" in summary:
        print(
            f"{PROG}: held-out validation reward {summary['val_reward_first']:.3f} (step "
            f"{summary['val_steps'][0]}) -> {summary['val_reward_last']:.3f} (step "
            f"{summary['val_steps'][1]})"
        )


def show_final_model(output: Path, env_id: str) -> None:
    """Where the trained weights are, how big, and how to evaluate them."""
    from rllm_train.native.checkpoint import FINAL_MODEL_FOLDER

    folder = output / FINAL_MODEL_FOLDER
    if not folder.is_dir():
        return
    size = sum(path.stat().st_size for path in folder.iterdir() if path.is_file())
    print(
        f"{PROG}: the trained model (weights only, {size / 1e6:.0f} MB) is {folder}; "
        f"evaluate it with: rllm-eval --env {env_id} --model {folder}"
    )


def show_validation(output: Path) -> None:
    """Held-out episodes before and after training side by side, and where to see more."""
    from rllm_agents.episodes.records import VALIDATION_EPISODES_FOLDER

    from rllm_train.run.showcase import show_before_after

    if not show_before_after(output):
        return
    curve = output / "reward_curve.png"
    seen = f"the reward curve is {curve}; " if curve.is_file() else ""
    print(
        f"{PROG}: {seen}browse every validation's episodes with: "
        f"rllm-view {output / VALIDATION_EPISODES_FOLDER}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM unwinds like Ctrl-C: the sampler, Ray and the run lock are released on the way.
    terminate_on_signals()
    import_from_current_folder()  # --env my_project.envs:... from my_project's folder
    output: Path | None = None  # the run folder, once known
    try:
        # Intermixed: overrides may sit between flags (rllm-train env.agent=m:A --steps 2 ...).
        args = build_parser().parse_intermixed_args(argv)
        config = config_from_args(args)
        output = Path(config.trainer.output)
        if args.repair and not config.trainer.resume:
            raise UsageError("--repair mends a run's logs for --resume; give both")
        setup = setup_run(config)  # the run, worked out once, for whichever backend
        backend = backend_module(config.trainer.backend)
        backend.check(setup)
        if args.dry_run:
            print(backend.dry_run(setup), end="")
            return 0
        # The run folder is checked and locked before anything slow: a bad path, a second
        # writer, a fresh run over an old one or a resume of nothing are each one line.
        with claim_run_folder(
            config.trainer.output, RUN_MARKERS, resume=config.trainer.resume, tool=PROG
        ) as claim:
            if config.trainer.resume:
                # Before the model loads: a damaged log refused (or mended) costs nothing.
                for repair in settle_logs(backend.resume_logs(setup), repair=args.repair):
                    print(f"{PROG}: --repair: {repair.describe()}")
            rows = backend.train(setup, claim.lock)
        report(config, rows)
    except RunStopped as error:
        print(f"{PROG}: stopped: {one_line(error)}", file=sys.stderr)
        return 1
    except UsageError as error:
        return report_usage_error(PROG, error)
    except ConfigError as error:
        print(f"{PROG}: bad config: {one_line(error)}", file=sys.stderr)
        return 2
    except RunFolderError as error:
        print(f"{PROG}: {one_line(error)}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Terminated) as stop:
        return report_stop(PROG, stop, resumable=True)
    except Exception as error:
        status = report_full_disk(PROG, error, output)
        if status is None:
            raise
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
