"""``rllm-eval``: evaluate a model on an rllm env; mean reward, pass@1 and unbiased pass@k.

    rllm-eval --env rllm/Math-v0 --model smollm2 --n 8 --num-tasks 20 --output runs/math
    rllm-eval --env rllm/FrozenLake-v0 --base-url http://127.0.0.1:8000/v1 --model my-model
    rllm-eval --env rllm/Math-v0 --model smollm2 --llamacpp     # serve the GGUF with llama.cpp

Models: ``tiny`` / ``smollm2`` (embedded) or a local Hugging Face directory run in-process by
the batched local engine (token-level); with ``--base-url`` any OpenAI-compatible server;
with ``--llamacpp`` a llama.cpp server started and stopped for the run. Writes
``OUTPUT/episodes.jsonl`` (one episode a line) and ``OUTPUT/summary.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rllm_agents.agents.registry import agent_for_env
from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution.engine import AgentExecutionEngine
from rllm_agents.metrics import summarize_episodes
from rllm_agents.types import Episode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rllm-eval", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--env", required=True, help="env id, e.g. rllm/Math-v0")
    parser.add_argument("--model", default="smollm2", help="tiny | smollm2 | HF dir | served name")
    parser.add_argument("--base-url", help="an OpenAI-compatible server (…/v1)")
    parser.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="default: $OPENAI_API_KEY"
    )
    parser.add_argument("--llamacpp", action="store_true", help="serve the model with llama.cpp")
    parser.add_argument("--n", type=int, default=1, help="samples per task (for pass@k)")
    parser.add_argument("--num-tasks", type=int, default=None, help="first N tasks of the split")
    parser.add_argument("--split", help="task split, e.g. test or gsm8k_test (tasks=shipped:…)")
    parser.add_argument("--env-kwargs", default="{}", help="JSON kwargs for gym.make")
    parser.add_argument("--parallel", type=int, default=16, help="concurrent episodes")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=512, help="per model turn")
    parser.add_argument("--max-response-tokens", type=int, default=None, help="per episode")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per episode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="local engine device (cpu, cuda)")
    parser.add_argument("--output", type=Path, default=None, help="directory for the results")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def env_kwargs_from(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = json.loads(args.env_kwargs)
    if not isinstance(kwargs, dict):
        raise SystemExit("--env-kwargs must be a JSON object")
    if args.split:
        kwargs["tasks"] = args.split if ":" in args.split else f"shipped:{args.split}"
    return kwargs


def make_env_factory(env_id: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
    import gymnasium as gym
    import rllm_envs  # noqa: F401 - registers the rllm/* ids

    return lambda: gym.make(env_id, **kwargs)


def task_rows(env_factory: Callable[[], Any], num_tasks: int | None) -> list[dict] | None:
    """The env's task rows (first `num_tasks`), or None for envs that draw from seeds."""
    env = env_factory()
    try:
        tasks = getattr(env.unwrapped, "tasks", None)
        if tasks is None or not hasattr(tasks, "__getitem__"):
            return None
        count = len(tasks) if num_tasks is None else min(num_tasks, len(tasks))
        return [dict(tasks[i]) for i in range(count)]
    finally:
        env.close()


def make_engine(args: argparse.Namespace) -> tuple[Any, Any]:
    """(rollout engine, tokenizer for token-level rendering or None)."""
    if args.base_url:
        from rllm_agents.engines.openai import OpenAIEngine

        return OpenAIEngine(args.base_url, args.model, api_key=args.api_key), None
    if args.llamacpp:
        from rllm_agents.engines.llamacpp_server import LlamaCppEngine

        return LlamaCppEngine.start(args.model), None
    from rllm_agents.engines.local import LocalEngine

    engine = LocalEngine.from_name(
        args.model, device=args.device, max_batch_size=args.parallel, seed=args.seed
    )
    return engine, engine.tokenizer


async def evaluate(args: argparse.Namespace) -> tuple[list[Episode], dict[str, Any]]:
    """Run the evaluation `args` describe; return the episodes and the summary."""
    if args.n < 1 or args.parallel < 1:
        raise SystemExit("--n and --parallel must be at least 1")
    env_factory = make_env_factory(args.env, env_kwargs_from(args))
    rows = task_rows(env_factory, args.num_tasks)
    if args.output:
        args.output.mkdir(parents=True, exist_ok=True)
    engine, tokenizer = make_engine(args)
    try:
        runner = AgentExecutionEngine(
            agent_for_env(args.env),
            env_factory,
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
    if args.output:
        (args.output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return episodes, summary


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
    args = build_parser().parse_args(argv)
    _, summary = asyncio.run(evaluate(args))
    print_summary(summary)
    if summary["episodes"] and summary["errors"] == summary["episodes"]:
        print("every episode failed; see the error field in episodes.jsonl", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
