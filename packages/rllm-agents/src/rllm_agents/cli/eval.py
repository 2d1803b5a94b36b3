"""``rllm-eval``: evaluate a model on an rllm env; mean reward, pass@1 and unbiased pass@k.

    rllm-eval --env rllm/Math-v0 --model smollm2 --n 8 --num-tasks 20 --output runs/math
    rllm-eval --env rllm/FrozenLake-v0 --base-url http://127.0.0.1:8000/v1 --model my-model
    rllm-eval --env rllm/Math-v0 --model smollm2 --engine transformers   # in-process

    rllm-eval --env rllm/Math-v0 --model smollm2 --agent-program examples/gateway/math_agent.py:run
    rllm-eval --env rllm/Math-v0 --model smollm2 --agent-cmd "python my_agent.py"

    rllm-eval replay runs/math                   # recorded actions against the env, no model
    rllm-eval rescore runs/math --grader math    # stored episodes graded again, no model

Models: a model with a GGUF (the embedded ``smollm2``, a ``.gguf`` path) runs on llama.cpp
servers started and stopped for the run (``--engine llamacpp``, the default when
llama-cpp-python is installed; ``--slots`` servers, each answering one request at a time);
``tiny``, a local Hugging Face directory, or any model with ``--engine transformers`` run
in-process on the batched local engine (token-level); with ``--base-url`` any
OpenAI-compatible server. Writes ``OUTPUT/episodes.jsonl`` (one episode a line, the record of
docs/agents/episodes.md: with each episode's env, seed and every action and observation, so
that ``rllm-eval replay`` and ``rllm-eval rescore`` can use it) and ``OUTPUT/summary.json``.

Agents: the env's registered agent, a ``BaseAgent`` class (``--agent``), or an agent program
that talks to the model over the OpenAI API, served to it by a recording gateway
(``--agent-program`` / ``--agent-cmd``, rllm_agents.programs; they need an env with task rows).

An ``--output`` that holds a run is refused unless ``--resume`` (continue it: finished
(task, sample) pairs are kept and skipped, the rest run) or ``--overwrite``; one run at a
time writes to a folder (a second is refused, naming the holder's pid). A damaged line in
``episodes.jsonl`` stops a resume, naming it; ``--resume --repair`` moves such lines to
``episodes.jsonl.damaged`` and keeps every whole one.

Scores cover the episodes that ran to an end; infrastructure failures (the server died, the
env's sandbox failed) are counted apart, as infra_failures.

Exit status: 0 done; 1 more episodes failed for infrastructure than --max-failure-rate
allows (default: any); 2 bad input (an unknown env id, split or model, an unreachable
server, a bad number, an unusable --output: one line on stderr naming what is valid, before
anything slow); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM). A model server the
command started stops with it, whatever ends it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_envs.core.loading import import_from_current_folder
from rllm_envs.core.turn_limit import FALLBACK_TURNS, default_turns

from rllm_agents.cli import episodes as episodes_cli
from rllm_agents.cli import eval_multiagent
from rllm_agents.cli.engine_choice import (
    LLAMACPP,
    SERVED,
    VLLM,
    add_engine_options,
    choose_engine,
)
from rllm_agents.cli.eval_envs import (
    env_kwargs_from,
    first_env,
    make_env_factory,
    task_rows,
)
from rllm_agents.cli.eval_jobs import (
    RUN_MARKERS,
    SUMMARY_FILE,
    all_jobs,
    finished_episodes,
    remaining_jobs,
)
from rllm_agents.cli.eval_players import (
    Player,
    RunSettings,
    choose_player,
    make_runner,
    program_flag,
)
from rllm_agents.cli.eval_report import failure_rate_exceeded, print_summary, run_summary
from rllm_agents.cli.usage import (
    CommandParser,
    UsageError,
    non_negative_float,
    one_line,
    positive_float,
    positive_int,
    probability,
    report_usage_error,
)
from rllm_agents.damaged_lines import move_damaged_aside
from rllm_agents.engines import event_loop
from rllm_agents.engines.base import EngineError
from rllm_agents.engines.slots import serving_slots
from rllm_agents.episodes.records import EVAL_EPISODES_FILE
from rllm_agents.run_folder import (
    RunFolderError,
    Terminated,
    claim_run_folder,
    report_full_disk,
    report_stop,
    terminate_on_signals,
    write_atomic,
)

PROG = "rllm-eval"
# A server may list many models; an error names this many of them.
MAX_LISTED_MODELS = 20
# Episodes at once when --parallel is not given: the local engine batches this many requests.
DEFAULT_PARALLEL = 16
# ... and against an engine with serving slots, this many episodes per slot: a llama.cpp
# server keeps only the last conversation it read, and an episode's next turn goes back to
# it (LlamaCppEngine), so with one episode per server each turn reads only its new tokens.
# More episodes would wait in the engine's queue and evict each other's prompts.
EPISODES_PER_SLOT = 1


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--env", required=True, help="env id, e.g. rllm/Math-v0")
    parser.add_argument("--model", default="smollm2", help="tiny | smollm2 | HF dir | served name")
    add_engine_options(parser)
    parser.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="default: $OPENAI_API_KEY"
    )
    parser.add_argument(
        "--n", type=positive_int, default=1, help="samples per task, for pass@k (default: 1)"
    )
    parser.add_argument(
        "--num-tasks", type=positive_int, default=None, help="first N tasks of the split"
    )
    parser.add_argument(
        "--split",
        help="task split, e.g. test or gsm8k_test (tasks=shipped:…); default: the env's "
        "shipped test split where it has one",
    )
    parser.add_argument("--env-kwargs", default="{}", help="JSON kwargs for gym.make")
    agent = parser.add_mutually_exclusive_group()
    agent.add_argument(
        "--agent",
        metavar="MODULE:CLASS",
        help="a BaseAgent class to play the env (default: the env's registered agent)",
    )
    agent.add_argument(
        "--agent-program",
        metavar="MODULE:FUNCTION",
        help="an agent program, async def run(task, base_url, api_key) -> reward | answer | "
        "dict, as "
        "module:function or path/to/file.py:function (docs/agents/gateway.md)",
    )
    agent.add_argument(
        "--agent-cmd",
        metavar="COMMAND",
        help="an agent program run as a command: the task as JSON on stdin, the endpoint in "
        "OPENAI_BASE_URL / OPENAI_API_KEY, its answer (or a JSON result object) as the last "
        "line of stdout",
    )
    parser.add_argument(
        "--gateway-processes",
        type=int,
        default=0,
        metavar="N",
        help="serve an agent program's calls from N gateway processes (with --base-url; for "
        "hundreds of programs at once, docs/agents/gateway.md); 0: from this process",
    )
    parser.add_argument("--agent-args", default="{}", help="JSON kwargs for the agent class")
    parser.add_argument(
        "--parallel",
        type=positive_int,
        default=None,
        help=f"concurrent episodes (default: {EPISODES_PER_SLOT} per llama.cpp slot, else "
        f"{DEFAULT_PARALLEL})",
    )
    parser.add_argument(
        "--max-turns",
        type=positive_int,
        default=None,
        help="model turns per episode (default: the env's own limit - FrozenLake: 2 x size^2 "
        f"moves, RunningTotal: one per addend - else {FALLBACK_TURNS})",
    )
    parser.add_argument(
        "--temperature", type=non_negative_float, default=0.6, help="sampling (default: 0.6)"
    )
    parser.add_argument("--top-p", type=probability, default=1.0, help="(default: 1.0)")
    parser.add_argument(
        "--max-tokens", type=positive_int, default=512, help="per model turn (default: 512)"
    )
    parser.add_argument(
        "--max-response-tokens", type=positive_int, default=None, help="per episode"
    )
    parser.add_argument(
        "--timeout", type=positive_float, default=None, help="s per episode (per program run)"
    )
    parser.add_argument("--seed", type=int, default=0, help="(default: 0)")
    parser.add_argument("--device", default="cpu", help="local engine device (cpu, cuda)")
    parser.add_argument("--output", type=Path, default=None, help="directory for the results")
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument(
        "--resume", action="store_true", help="continue the run in --output (skip what finished)"
    )
    existing.add_argument("--overwrite", action="store_true", help="replace the run in --output")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="with --resume: move damaged lines of episodes.jsonl to episodes.jsonl.damaged "
        "and keep every whole episode, instead of stopping",
    )
    parser.add_argument(
        "--max-failure-rate",
        type=probability_or_zero,
        default=0.0,
        help="the share of episodes that may fail for infrastructure before the exit "
        "status is 1 (default 0: any)",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--no-env-record",
        action="store_true",
        help="leave each episode's env record out (the run then cannot be replayed)",
    )
    parser.epilog = eval_multiagent.options_note(
        {option for action in parser._actions for option in action.option_strings}
    )
    return parser


def probability_or_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}")
    return value


# ---- the env --------------------------------------------------------------------------------


# ---- the model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSetup:
    """The model a run plays with: its rollout engine, the tokenizer for token-level rendering
    (None: the engine renders), and which engine the run chose (engine_choice's kinds)."""

    engine: Any
    tokenizer: Any
    kind: str


async def make_engine(args: argparse.Namespace) -> ModelSetup:
    """The model the command's options name, checked before the run.

    The engine comes from --base-url, --engine (--llamacpp) and the model (see
    rllm_agents.cli.engine_choice); a fallback from llama.cpp to transformers is one line on
    stderr.
    """
    choice = choose_engine(args.model, args.engine, args.base_url)
    if choice.notice:
        print(f"{PROG}: {choice.notice}", file=sys.stderr)
    if args.slots is not None and choice.kind != LLAMACPP:
        raise UsageError(f"--slots: only the llama.cpp engine has slots (this run: {choice.kind})")
    try:
        if choice.kind == SERVED:
            return ModelSetup(await _served_engine(args), None, choice.kind)
        if choice.kind == LLAMACPP:
            from rllm_agents.engines.llamacpp.server import LlamaCppEngine

            engine = LlamaCppEngine.start(args.model, slots=args.slots, seed=args.seed)
            return ModelSetup(engine, None, choice.kind)
        if choice.kind == VLLM:
            from rllm_agents.engines.vllm.engine import VLLMEngine

            engine = VLLMEngine(args.model, seed=args.seed)
            return ModelSetup(engine, engine.tokenizer, choice.kind)
        return ModelSetup(*_local_engine(args), choice.kind)
    except (EngineError, ImportError, OSError, ValueError) as error:
        if isinstance(error, UsageError):
            raise
        raise UsageError(str(error)) from error


def episode_parallelism(args: argparse.Namespace, engine: Any) -> int:
    """--parallel, or what keeps the engine busy: a couple of episodes per serving slot of an
    engine that has them (more would only queue), else DEFAULT_PARALLEL."""
    if args.parallel is not None:
        return args.parallel
    slots = serving_slots(engine)
    return EPISODES_PER_SLOT * slots if slots else DEFAULT_PARALLEL


async def _served_engine(args: argparse.Namespace) -> Any:
    from rllm_agents.engines.openai import OpenAIEngine

    engine = OpenAIEngine(args.base_url, args.model, api_key=args.api_key)
    try:
        served = await engine.served_models()
    except EngineError as error:
        await engine.aclose()
        raise UsageError(f"{error}; start the server or check --base-url / --api-key") from error
    if served is not None and args.model not in served:
        await engine.aclose()
        listed = ", ".join(served[:MAX_LISTED_MODELS]) + (
            ", ..." if len(served) > MAX_LISTED_MODELS else ""
        )
        raise UsageError(
            f"model {args.model!r} is not served at {args.base_url}; pass one of: {listed}"
        )
    return engine


def _local_engine(args: argparse.Namespace) -> tuple[Any, Any]:
    from rllm_agents.models import resolve_model

    resolve_model(args.model)  # an unknown name fails here, before torch is even imported
    from rllm_agents.engines.local import LocalEngine

    engine = LocalEngine.from_name(
        args.model,
        device=args.device,
        max_batch_size=args.parallel or DEFAULT_PARALLEL,
        seed=args.seed,
    )
    return engine, engine.tokenizer


# ---- the run --------------------------------------------------------------------------------


async def evaluate(
    args: argparse.Namespace, *, freeze_setup: bool = False
) -> tuple[list[Any], dict[str, Any]]:
    """Run the evaluation `args` describe; return the episodes and the summary.

    Every check on the user's input (env id and arguments, model, server) runs before the
    first episode; a failed one raises UsageError. `args` is only read: what the run decides
    itself (the engine, the episodes at once) is passed on as values and recorded in the
    summary's config. ``freeze_setup`` (for the command's own process) moves every object
    made before the rollout out of the garbage collector's reach for good (``gc.freeze``), so
    a process that goes on afterwards should leave it off.
    """
    started_at = time.time()
    if (args.resume or args.overwrite) and not args.output:
        raise UsageError("--resume and --overwrite need --output")
    if args.repair and not args.resume:
        raise UsageError("--repair mends the episodes of a run for --resume; give both")
    try:
        claim = (
            claim_run_folder(
                args.output,
                RUN_MARKERS,
                resume=args.resume,
                overwrite=args.overwrite,
                tool=PROG,
            )
            if args.output
            else None
        )
    except RunFolderError as error:
        raise UsageError(str(error)) from None
    started = False
    try:
        episodes_path = args.output / EVAL_EPISODES_FILE if args.output else None
        # Read before anything slow: a damaged log is refused before a model loads.
        if args.repair:
            repair = move_damaged_aside(episodes_path)
            if repair.moved:
                print(f"{PROG}: --repair: {repair.describe()}")
        done = finished_episodes(episodes_path) if args.resume else []
        player = choose_player(args)
        rows, rollout_envs = env_setup(args, player)
        model = await make_engine(args)
        started = True
        settings = RunSettings(model.kind, episode_parallelism(args, model.engine), episodes_path)
        if args.overwrite:
            for name in RUN_MARKERS:
                (args.output / name).unlink(missing_ok=True)
        if freeze_setup:
            # What exists now (modules, engine, task rows) lives as long as the run: the
            # collector need not walk it again at every full collection while episodes are
            # made and freed.
            gc.freeze()
        jobs = remaining_jobs(all_jobs(args, rows), done)
        try:
            runner = make_runner(args, player, rollout_envs, model, settings)
            new = await play_jobs(runner, jobs, seeded=rows is None)
        finally:
            await model.engine.aclose()
            if freeze_setup:
                # Back under the collector, so that interpreter exit frees them: frozen
                # objects of native extensions are reported as leaks there (nanobind's
                # "leaked instances" lines after the summary).
                gc.unfreeze()
        episodes = done + new
        decided = {"engine": settings.engine_kind, "parallel": settings.parallel}
        summary = run_summary(
            args, episodes, resumed=len(done), runner=runner, engine=model.engine,
            decided=decided, started_at=started_at,
        )  # fmt: skip
        if args.output:
            write_atomic(args.output / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    finally:
        if claim is not None:
            claim.release(started)
    return episodes, summary


def env_setup(args: argparse.Namespace, player: Player) -> tuple[list[dict] | None, Any]:
    """(the env's task rows, or None for an env that draws its tasks from seeds; the factory
    of the rollout's envs), after one env made with the user's arguments to check them."""
    kwargs = env_kwargs_from(args)
    env = first_env(make_env_factory(args.env, kwargs), args.env, kwargs)
    try:
        rows = task_rows(env, args.num_tasks)
        if args.max_turns is None:  # play as long as the env allows, not a guess of ours
            args.max_turns = default_turns(env)
    finally:
        env.close()
    if player.program is not None and rows is None:
        raise UsageError(
            f"{program_flag(args)}: {args.env} draws its tasks from seeds, and an agent "
            "program is given a task row; choose an env with a task set (or a --split)"
        )
    # That first env was made under Gymnasium's env checker, which looks at its spaces; the
    # hundreds of envs of the rollout, of the same class, skip it (and its checks of every
    # env's first reset and step): each costs about half as much to make and reset, paid by
    # every agent before its first request. --env-kwargs '{"disable_env_checker": false}'
    # keeps it on.
    return rows, make_env_factory(args.env, {"disable_env_checker": True, **kwargs})


async def play_jobs(runner: Any, jobs: list[tuple[dict | None, int]], *, seeded: bool) -> list:
    """The episodes of `jobs`: seeds alone for an env that draws its tasks from them."""
    if not jobs:
        return []
    if seeded:
        return await runner.execute_seeds([seed for _, seed in jobs])
    return await runner.execute_tasks([task for task, _ in jobs], [seed for _, seed in jobs])


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    import_from_current_folder()  # --env my_project.envs:... from my_project's folder
    if arguments and arguments[0] in episodes_cli.SUBCOMMANDS:  # replay, rescore: no model
        return episodes_cli.main(arguments)
    if eval_multiagent.requested(arguments):  # a PettingZoo env module: games, not episodes
        return eval_multiagent.main(arguments)
    # SIGTERM unwinds like Ctrl-C: a llama.cpp server (or other child) is stopped on the way.
    terminate_on_signals()
    output: Path | None = None  # the run folder, once known
    try:
        args = build_parser().parse_args(arguments)
        output = args.output
        episodes, summary = event_loop.run(evaluate(args, freeze_setup=True))
    except UsageError as error:
        return report_usage_error(PROG, error)
    except (KeyboardInterrupt, Terminated) as stop:
        return report_stop(PROG, stop, resumable="--output" in arguments)
    except Exception as error:
        status = report_full_disk(PROG, error, output)
        if status is None:
            raise
        return status
    print_summary(summary)
    if failure_rate_exceeded(summary, args.max_failure_rate):
        first = next((e.error or e.failure for e in episodes if e.error or e.failure), "")
        what = "every episode" if summary["scored_episodes"] == 0 else (
            f"{summary['infra_failures']} of {summary['episodes']} episodes")  # fmt: skip
        print(f"{PROG}: {what} failed for infrastructure (above --max-failure-rate "
              f"{args.max_failure_rate}); the first: {one_line(first or 'see episodes.jsonl')}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
