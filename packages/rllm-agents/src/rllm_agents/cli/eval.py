"""``rllm-eval``: evaluate a model on an rllm env; mean reward, pass@1 and unbiased pass@k.

    rllm-eval --env rllm/Math-v0 --model smollm2 --n 8 --num-tasks 20 --output runs/math
    rllm-eval --env rllm/FrozenLake-v0 --base-url http://127.0.0.1:8000/v1 --model my-model
    rllm-eval --env rllm/Math-v0 --model smollm2 --llamacpp     # serve the GGUF with llama.cpp

Models: ``tiny`` / ``smollm2`` (embedded) or a local Hugging Face directory run in-process by
the batched local engine (token-level); with ``--base-url`` any OpenAI-compatible server;
with ``--llamacpp`` a llama.cpp server started and stopped for the run. Writes
``OUTPUT/episodes.jsonl`` (one episode a line) and ``OUTPUT/summary.json``.

Bad input (an unknown env id, split or model, an unreachable server, a bad number) ends the
command with one line on stderr naming what is valid, and exit status 2.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rllm_agents.cli import eval_multiagent
from rllm_agents.cli.usage import (
    CommandParser,
    UsageError,
    check_env_id,
    non_negative_float,
    one_line,
    positive_float,
    positive_int,
    probability,
    report_usage_error,
)
from rllm_agents.engines import event_loop
from rllm_agents.engines.base import EngineError

PROG = "rllm-eval"
# A server may list many models; an error names this many of them.
MAX_LISTED_MODELS = 20


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--env", required=True, help="env id, e.g. rllm/Math-v0")
    parser.add_argument("--model", default="smollm2", help="tiny | smollm2 | HF dir | served name")
    server = parser.add_mutually_exclusive_group()
    server.add_argument("--base-url", help="an OpenAI-compatible server (…/v1)")
    server.add_argument("--llamacpp", action="store_true", help="serve the model with llama.cpp")
    parser.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="default: $OPENAI_API_KEY"
    )
    parser.add_argument("--n", type=positive_int, default=1, help="samples per task (pass@k)")
    parser.add_argument(
        "--num-tasks", type=positive_int, default=None, help="first N tasks of the split"
    )
    parser.add_argument("--split", help="task split, e.g. test or gsm8k_test (tasks=shipped:…)")
    parser.add_argument("--env-kwargs", default="{}", help="JSON kwargs for gym.make")
    parser.add_argument(
        "--agent",
        metavar="MODULE:CLASS",
        help="a BaseAgent class to play the env (default: the env's registered agent)",
    )
    parser.add_argument("--agent-args", default="{}", help="JSON kwargs for the agent class")
    parser.add_argument("--parallel", type=positive_int, default=16, help="concurrent episodes")
    parser.add_argument("--max-turns", type=positive_int, default=8)
    parser.add_argument("--temperature", type=non_negative_float, default=0.6)
    parser.add_argument("--top-p", type=probability, default=1.0)
    parser.add_argument("--max-tokens", type=positive_int, default=512, help="per model turn")
    parser.add_argument(
        "--max-response-tokens", type=positive_int, default=None, help="per episode"
    )
    parser.add_argument("--timeout", type=positive_float, default=None, help="s per episode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="local engine device (cpu, cuda)")
    parser.add_argument("--output", type=Path, default=None, help="directory for the results")
    parser.add_argument("--no-progress", action="store_true")
    return parser


# ---- the env --------------------------------------------------------------------------------


def env_kwargs_from(args: argparse.Namespace) -> dict[str, Any]:
    try:
        kwargs = json.loads(args.env_kwargs)
    except ValueError as error:
        raise UsageError(f"--env-kwargs is not valid JSON ({error}): {args.env_kwargs!r}") from None
    if not isinstance(kwargs, dict):
        raise UsageError("--env-kwargs must be a JSON object, e.g. '{\"max_turns\": 3}'")
    if args.split:
        kwargs["tasks"] = args.split if ":" in args.split else f"shipped:{args.split}"
    return kwargs


def make_env_factory(env_id: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
    """A factory for `env_id` (checked against Gymnasium's registry first) with `kwargs`."""
    import gymnasium as gym

    plain_id = check_env_id(env_id)
    return lambda: gym.make(plain_id, **kwargs)


def first_env(env_factory: Callable[[], Any], env_id: str, kwargs: dict[str, Any]) -> Any:
    """One env, made to check the arguments: a split or keyword it refuses is a UsageError."""
    try:
        return env_factory()
    except Exception as error:  # noqa: BLE001 - whatever the env refuses, the user must read
        given = f" with {kwargs}" if kwargs else ""
        raise UsageError(f"cannot make {env_id}{given}: {error}") from error


def task_rows(env: Any, num_tasks: int | None) -> list[dict] | None:
    """The env's task rows (first `num_tasks`), or None for envs that draw from seeds."""
    tasks = getattr(env.unwrapped, "tasks", None)
    if tasks is None or not hasattr(tasks, "__getitem__"):
        return None
    count = len(tasks) if num_tasks is None else min(num_tasks, len(tasks))
    return [dict(tasks[i]) for i in range(count)]


# ---- the model ------------------------------------------------------------------------------


async def make_engine(args: argparse.Namespace) -> tuple[Any, Any]:
    """(rollout engine, tokenizer for token-level rendering or None), checked before the run."""
    try:
        if args.base_url:
            return await _served_engine(args), None
        if args.llamacpp:
            from rllm_agents.engines.llamacpp_server import LlamaCppEngine

            return LlamaCppEngine.start(args.model), None
        return _local_engine(args)
    except (EngineError, ImportError, OSError, ValueError) as error:
        if isinstance(error, UsageError):
            raise
        raise UsageError(str(error)) from error


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
        args.model, device=args.device, max_batch_size=args.parallel, seed=args.seed
    )
    return engine, engine.tokenizer


# ---- the run --------------------------------------------------------------------------------


async def evaluate(
    args: argparse.Namespace, *, freeze_setup: bool = False
) -> tuple[list[Any], dict[str, Any]]:
    """Run the evaluation `args` describe; return the episodes and the summary.

    Every check on the user's input (env id and arguments, model, server) runs before the
    first episode; a failed one raises UsageError. ``freeze_setup`` (for the command's own
    process) moves every object made before the rollout out of the garbage collector's reach
    for good (``gc.freeze``), so a process that goes on afterwards should leave it off.
    """
    started_at = time.time()
    from rllm_agents.agents.registry import agent_for_env
    from rllm_agents.engines.base import SamplingParams
    from rllm_agents.execution.engine import AgentExecutionEngine
    from rllm_agents.metrics import summarize_episodes

    agent_class = load_agent(args.agent) if args.agent else agent_for_env(args.env)
    agent_args = json_object(args.agent_args, "--agent-args")
    kwargs = env_kwargs_from(args)
    env = first_env(make_env_factory(args.env, kwargs), args.env, kwargs)
    try:
        rows = task_rows(env, args.num_tasks)
    finally:
        env.close()
    # That first env was made under Gymnasium's env checker, which looks at its spaces; the
    # hundreds of envs of the rollout, of the same class, skip it (and its checks of every
    # env's first reset and step): each costs about half as much to make and reset, paid by
    # every agent before its first request. --env-kwargs '{"disable_env_checker": false}'
    # keeps it on.
    rollout_envs = make_env_factory(args.env, {"disable_env_checker": True, **kwargs})
    engine, tokenizer = await make_engine(args)
    if args.output:
        args.output.mkdir(parents=True, exist_ok=True)
    if freeze_setup:
        # What exists now (modules, engine, task rows) lives as long as the run: the collector
        # need not walk it again at every full collection while episodes are made and freed.
        gc.freeze()
    try:
        runner = AgentExecutionEngine(
            lambda: agent_class(**agent_args),
            rollout_envs,
            engine,
            tokenizer=tokenizer,
            n_parallel=args.parallel,
            max_turns=args.max_turns,
            max_response_tokens=args.max_response_tokens,
            trajectory_timeout=args.timeout,
            sampling=SamplingParams(
                temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens
            ),
            seed=args.seed,
            output_path=args.output / "episodes.jsonl" if args.output else None,
            progress=False if args.no_progress else None,
        )
        if rows is None:
            seeds = [args.seed + i for i in range(args.num_tasks or 100) for _ in range(args.n)]
            episodes = await runner.execute_seeds(seeds)
        else:
            repeated = [row for row in rows for _ in range(args.n)]
            episodes = await runner.execute_tasks(repeated)
    finally:
        await engine.aclose()
    summary = summarize_episodes(episodes, samples_per_task=args.n)
    for key in ("wall_time", "episodes_per_s", "completion_tokens_per_s"):
        summary[key] = runner.last_metrics.get(key)
    summary["config"] = {  # the run's settings, never its secret
        key: str(value) if isinstance(value, Path) else value
        for key, value in vars(args).items()
        if key != "api_key"
    }
    # Wall-clock stamps of the evaluation proper (imports before it and the table after it
    # excluded), comparable with stamps taken by other processes.
    summary["started_at"], summary["finished_at"] = started_at, time.time()
    if args.output:
        (args.output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return episodes, summary


def load_agent(path: str) -> type:
    """The agent class `path` ("module:Class") names, or a UsageError saying why not."""
    from rllm_agents.agents.base import BaseAgent
    from rllm_agents.agents.registry import load_entry_point

    if ":" not in path:
        raise UsageError(f"--agent: {path!r} is not of the form module:Class")
    try:
        agent_class = load_entry_point(path)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"--agent: cannot load {path!r}: {error}") from error
    if not (isinstance(agent_class, type) and issubclass(agent_class, BaseAgent)):
        raise UsageError(f"--agent: {path!r} is not a BaseAgent subclass")
    return agent_class


def json_object(text: str, flag: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{flag}: not valid JSON: {error}") from error
    if not isinstance(value, dict):
        raise UsageError(f"{flag}: expected a JSON object, got {text!r}")
    return value


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"rllm-eval {summary['config']['env']} · {summary['config']['model']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    shown = ["tasks", "episodes", "mean_reward", "accuracy"]
    shown += [key for key in summary if key.startswith("pass@")]
    shown += ["errors", "env_failures", "completion_tokens_per_s", "wall_time"]
    for key in shown:
        value = summary.get(key)
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    reasons = ", ".join(f"{k}={v}" for k, v in summary["termination_reasons"].items())
    table.add_row("termination", reasons)
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if eval_multiagent.requested(arguments):  # a PettingZoo env module: games, not episodes
        return eval_multiagent.main(arguments)
    try:
        args = build_parser().parse_args(arguments)
        episodes, summary = event_loop.run(evaluate(args, freeze_setup=True))
    except UsageError as error:
        return report_usage_error(PROG, error)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    print_summary(summary)
    if summary["episodes"] and summary["errors"] == summary["episodes"]:
        first = next((e.error for e in episodes if e.error), "see episodes.jsonl")
        print(f"{PROG}: every episode failed; the first: {one_line(first)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
