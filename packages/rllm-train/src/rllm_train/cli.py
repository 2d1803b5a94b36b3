"""``rllm-train``: train a language agent with RL on any Gymnasium-registered env.

With no arguments it runs the embedded default: SmolLM2-135M-Instruct learning single-digit
addition on the CPU, with GRPO (see docs/training/native.md).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import urllib.parse
from collections.abc import Sequence

from rllm_agents.cli.usage import (
    CommandParser,
    UsageError,
    one_line,
    positive_int,
    report_usage_error,
)
from rllm_agents.run_folder import (
    RunFolderError,
    RunLock,
    claim_run_folder,
    terminate_on_signals,
)

from rllm_train.config import (
    ALGORITHMS,
    BACKENDS,
    CURRICULUM_KINDS,
    EXECUTORS,
    ConfigError,
    TrainConfig,
    build_config,
)

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
  rllm-train --executor ray --ray-address HEAD:6379 rollout.dispatch=async   # envs on Ray
  rllm-train --env kuhn_poker_v0 multiagent.seats.player_1=random   # vs a scripted player
  rllm-train --env tictactoe_v0 --algorithm rae rollout.n=1           # self-play, every seat
  rllm-train --env rllm/FrozenLake-v0 --curriculum plr    # tasks weighted by measured success
  rllm-train --env rllm/Math-v0 --agent-program examples/gateway/math_agent.py:run   # a program
  rllm-train --env rllm/Math-v0 --agent-cmd "python my_agent.py"      # a program as a command
  rllm-train --algorithm sft --data runs/eval --output runs/sft    # fine-tune on the best episodes
  rllm-train --init-from runs/sft --output runs/rl                 # then RL from that checkpoint
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
        "OPENAI_BASE_URL / OPENAI_API_KEY, result as the last line of stdout)",
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


# What a run leaves in its folder: any of them means the folder holds a run (--resume).
RUN_MARKERS = ("checkpoints/latest", "metrics.jsonl", "config.yaml")


def _run_native(config: TrainConfig, lock: RunLock) -> None:
    from rllm_train.native.reporting import run_summary, step_rows
    from rllm_train.native.trainers import trainer_class

    every_row = trainer_class(config)(config, run_lock=lock).train()
    rows = step_rows(every_row)
    summary = run_summary(every_row)
    if "sft_probe_loss_first" in summary:  # the recorded rewards say nothing new: the loss does
        print(
            f"rllm-train: {len(rows)} fine-tuning steps on {summary['sft_sequences']} sequences; "
            f"loss on them {summary['sft_probe_loss_first']:.3f} -> "
            f"{summary['sft_probe_loss_last']:.3f}; checkpoint in "
            f"{config.trainer.output}/checkpoints (rllm-train --init-from "
            f"{config.trainer.output} ... starts RL from it)"
        )
    elif rows:
        first, last = rows[0], rows[-1]
        print(
            f"rllm-train: {len(rows)} steps; reward {first['reward_mean']:.3f} (step "
            f"{first['step']}) -> {last['reward_mean']:.3f} (step {last['step']}); "
            f"metrics in {config.trainer.output}/metrics.jsonl"
        )
    if "val_reward_first" in summary:
        print(
            f"rllm-train: held-out validation reward {summary['val_reward_first']:.3f} (step "
            f"{summary['val_steps'][0]}) -> {summary['val_reward_last']:.3f} (step "
            f"{summary['val_steps'][1]})"
        )


def _run_verl(config: TrainConfig, lock: RunLock) -> None:
    try:
        from rllm_train import verl as verl_backend
    except ImportError as error:
        raise ConfigError(
            f"trainer.backend: verl needs the verl backend: pip install 'rllm-train[verl]' "
            f"({error})"
        ) from error
    verl_backend.run(config)


BACKEND_RUNNERS = {"native": _run_native, "verl": _run_verl}


def _dry_run_native(config: TrainConfig) -> None:
    import yaml

    print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")


def _dry_run_verl(config: TrainConfig) -> None:
    # verl composes and validates its own trainer config from ours: printing that (and the
    # data layout) checks far more than echoing our config. Without verl installed this
    # raises VerlUnavailableError, a ConfigError that says what to install.
    from rllm_train import verl as verl_backend

    print(verl_backend.dry_run(config), end="")


# --dry-run: check the config as the backend would, print it, start nothing slow.
DRY_RUNS = {"native": _dry_run_native, "verl": _dry_run_verl}


def check_native(config: TrainConfig) -> None:
    """What the native backend needs that the config alone cannot tell: the model and the env.

    Both checks are quick (no model is loaded); a failed one is a ConfigError naming the key.
    """
    from rllm_agents.models import EMBEDDED_MODELS, resolve_model

    from rllm_train.envs import check_env
    from rllm_train.native.multiagent_setup import multiagent_setup

    if config.model.name not in EMBEDDED_MODELS:  # embedded ones are built on first use
        try:
            resolve_model(config.model.name)
        except FileNotFoundError as error:
            raise ConfigError(f"model.name: {error}") from error
    from rllm_train.datasets import run_data
    from rllm_train.native.program_sampler import check_program_run

    if config.model.init_from:
        from rllm_train.native.checkpoint import checkpoint_file

        try:
            checkpoint_file(config.model.init_from)
        except FileNotFoundError as error:
            raise ConfigError(f"model.init_from: {error}") from error
    multiagent = multiagent_setup(config)
    if config.algorithm.name == "sft":
        from rllm_train.datasets import run_data
        from rllm_train.native.sft_data import select_trajectories, validation_task_ids

        # The files exist and hold episodes that pass, on tasks the run does not validate on.
        val = run_data(config).val if multiagent is None else None
        select_trajectories(config.sft, validation_task_ids(val))
    if multiagent is None:  # a multi-agent env: its seats are checked there
        if not config.env.entry_point:
            check_env(config.env.id, config.env.kwargs)
    # data.train / data.val name sets that exist; an agent program has rows to play
    check_program_run(config, multiagent, run_data(config) if multiagent is None else None)
    from rllm_train.native.tree import check_tree_env

    check_tree_env(config)  # rollout.tree: the env can be snapshotted


def check_verl(config: TrainConfig) -> None:
    """The verl run's own checks (placement, algorithm, mode, CPU-mode limits), done before
    the run folder is claimed so a refused run leaves nothing behind. Without verl installed
    there is nothing to check here: the runner says what to install."""
    try:
        from rllm_train.verl import as_spec
        from rllm_train.verl.spec import validate_spec
    except ImportError:
        return
    validate_spec(as_spec(config))


def check_program(config: TrainConfig) -> None:
    """An agent program loads and has task rows to play (a ConfigError naming the key if not);
    quick, and done before the run folder is claimed."""
    from rllm_train.datasets import run_data
    from rllm_train.native.program_sampler import check_program_run

    check_program_run(config, None, run_data(config))


# Where Ray's head listens when an address names no port: the GCS, or the Ray Client server.
RAY_DEFAULT_PORTS = {"": 6379, "ray": 10001}


def ray_head(address: str) -> tuple[str, int] | None:
    """(host, port) of the Ray cluster an address names; None when Ray finds or starts one
    itself ("" or "local": a cluster for the run, "auto": the one this machine runs)."""
    if address in ("", "local", "auto"):
        return None
    scheme, _, rest = address.rpartition("://")
    if scheme not in RAY_DEFAULT_PORTS:
        raise ConfigError(f"rollout.ray_address: {address!r} is not HOST:PORT or ray://HOST:PORT")
    try:
        parts = urllib.parse.urlsplit("//" + rest)
        port = parts.port or RAY_DEFAULT_PORTS[scheme]
    except ValueError as error:
        raise ConfigError(f"rollout.ray_address: {address!r}: {error}") from error
    if not parts.hostname:
        raise ConfigError(f"rollout.ray_address: {address!r} names no host")
    return parts.hostname, port


def check_ray_cluster(config: TrainConfig, timeout: float = 5.0) -> None:
    """With `rollout.executor=ray`, that the named cluster's head answers: ray.init waits on
    an address nothing listens at with no end, after the model has been loaded."""
    if config.rollout.executor != "ray":
        return
    head = ray_head(config.rollout.ray_address or os.environ.get("RAY_ADDRESS", ""))
    if head is None:
        return
    try:
        socket.create_connection(head, timeout=timeout).close()
    except OSError as error:
        raise ConfigError(
            f"rollout.ray_address: cannot reach the Ray cluster at {head[0]}:{head[1]} "
            f"(--ray-address or $RAY_ADDRESS): {error.strerror or error}"
        ) from error


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM unwinds like Ctrl-C: the sampler, Ray and the run lock are released on the way.
    terminate_on_signals()
    try:
        # Intermixed: overrides may sit between flags (rllm-train env.agent=m:A --steps 2 ...).
        args = build_parser().parse_intermixed_args(argv)
        config = config_from_args(args)
        if config.trainer.backend == "native":
            check_native(config)
            check_ray_cluster(config)
        else:
            check_verl(config)
            if config.program.given:
                check_program(config)
        if args.dry_run:
            DRY_RUNS[config.trainer.backend](config)
            return 0
        # The run folder is checked and locked before anything slow: a bad path, a second
        # writer, a fresh run over an old one or a resume of nothing are each one line.
        with claim_run_folder(
            config.trainer.output, RUN_MARKERS, resume=config.trainer.resume
        ) as claim:
            BACKEND_RUNNERS[config.trainer.backend](config, claim.lock)
    except UsageError as error:
        return report_usage_error(PROG, error)
    except ConfigError as error:
        print(f"{PROG}: bad config: {one_line(error)}", file=sys.stderr)
        return 2
    except RunFolderError as error:
        print(f"{PROG}: {one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; continue with --resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
