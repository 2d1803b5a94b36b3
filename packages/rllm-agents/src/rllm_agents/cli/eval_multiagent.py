"""``rllm-eval`` on a multi-agent env: a model against a named opponent, win rate with a 95 % CI.

    rllm-eval --env tictactoe_v0 --model smollm2 --opponent random --num-games 50
    rllm-eval --env kuhn_poker_v0 --model smollm2 --engine transformers --opponent random --seat 1
    rllm-eval --env classic_v0 --env-kwargs '{"game": "connect_four_v3"}' --opponent first
    rllm-eval --env referential_v0 --model smollm2 --opponent self          # the model on every seat
    rllm-eval --env solver_judge_v0 --model smollm2 --opponent random --seat judge_0

``--env`` names a module of :mod:`rllm_envs.multiagent` (``tictactoe_v0``) or any importable
PettingZoo-style module with ``parallel_env()`` (``rllm_envs.multiagent.kuhn_poker_v0``,
``my_project.my_game_v1``). The model (options as for single-agent envs: ``--model``,
``--base-url``, ``--engine``; smollm2 on llama.cpp by default) plays the seats ``--seat`` names; the ``--opponent`` plays the
others: a scripted player (``random``, ``first``, ``tictactoe_expert``, ``oracle_speaker``,
``literal_listener``), ``self`` (the model on every seat: self-play), or ``model:<name or
dir>`` (another local model, e.g. a frozen checkpoint). ``--seat alternate`` (default) moves
the model to the next seat every game, so first-move advantage averages out.

Prints, per policy and per seat, wins, draws, losses, the win rate with its Wilson 95 %
interval (success rate for envs without winners), mean reward, invalid moves and forfeits, and
failures by kind. Writes ``OUTPUT/episodes.jsonl`` and ``OUTPUT/summary.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rllm_agents.agents.opponents import OPPONENTS, scripted_move
from rllm_agents.cli.engine_choice import (
    LLAMACPP,
    SERVED,
    VLLM,
    add_engine_options,
    choose_engine,
)
from rllm_agents.engines import make_engine
from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution.env_spec import ParallelEnvSpec
from rllm_agents.execution.multiagent import game_tasks, multiagent_engine
from rllm_agents.execution.policies import ModelPolicy, ScriptedPolicy
from rllm_agents.types import Episode

PROG = "rllm-eval"
MODEL = "model"
SELF_PLAY = "self"
ALTERNATE = "alternate"


def multiagent_env_module(name: str) -> ModuleType | None:
    """The PettingZoo-style module `name` names (short names are ours), or None when `name` is
    not one (e.g. a Gymnasium id such as ``rllm/Math-v0``)."""
    if "/" in name or ":" in name:
        return None
    from rllm_envs.multiagent import ENV_MODULES

    path = f"rllm_envs.multiagent.{name}" if name in ENV_MODULES else name
    if "." not in path:
        return None
    from rllm_envs.core.loading import LoadError, load_module

    try:
        module = load_module(path, what="--env")
    except LoadError:
        return None
    return module if callable(getattr(module, "parallel_env", None)) else None


def requested(argv: list[str]) -> bool:
    """Whether an ``rllm-eval`` command line names a multi-agent env."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--env")
    known, _ = probe.parse_known_args(argv)
    return bool(known.env) and multiagent_env_module(known.env) is not None


def options_note(single_agent_options: set[str]) -> str:
    """For the single-agent --help: the multi-agent envs, and the options only their game
    evaluation takes (read off both parsers, so the help never disagrees with them)."""
    from rllm_envs.multiagent import ENV_MODULES

    own = [
        action.option_strings[0]
        for action in build_parser()._actions
        if action.option_strings and action.option_strings[0] not in single_agent_options
    ]
    return (
        f"multi-agent envs ({', '.join(ENV_MODULES)}, or a module with parallel_env) play "
        f"games instead, with these options as well: {', '.join(own)}.\n"
        "rllm-eval --env tictactoe_v0 --help describes them."
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--env", required=True, help="tictactoe_v0 | module path with parallel_env")
    parser.add_argument("--env-kwargs", default="{}", help="JSON kwargs for parallel_env()")
    parser.add_argument("--model", default="smollm2", help="tiny | smollm2 | HF dir | served name")
    add_engine_options(parser)
    parser.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="default: $OPENAI_API_KEY"
    )
    parser.add_argument(
        "--opponent",
        default="random",
        help=f"{' | '.join(sorted(OPPONENTS))} | self | model:<name or dir>",
    )
    parser.add_argument(
        "--seat",
        default=ALTERNATE,
        help="the model's seat(s): alternate | an index | a name | a comma-separated list",
    )
    parser.add_argument("--num-games", "--num-tasks", type=int, default=50, dest="num_games")
    parser.add_argument("--parallel", type=int, default=8, help="concurrent games")
    parser.add_argument("--max-cycles", type=int, default=200, help="parallel steps per game")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=128, help="per model turn")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per game")
    parser.add_argument("--retries", type=int, default=3, help="retries of a failed game")
    parser.add_argument("--seed", type=int, default=0, help="game i is reset with seed + i")
    parser.add_argument("--device", default="cpu", help="local engine device (cpu, cuda)")
    parser.add_argument("--output", type=Path, default=None, help="directory for the results")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def env_seats(module: ModuleType, kwargs: dict[str, Any]) -> list[str]:
    env = module.parallel_env(**kwargs)
    try:
        return list(env.possible_agents)
    finally:
        env.close()


def model_seats(spec: str, seats: list[str]) -> list[str] | None:
    """The seats the model plays by ``--seat`` (None: alternate game by game)."""
    if spec == ALTERNATE:
        return None
    chosen = []
    for part in (piece.strip() for piece in spec.split(",")):
        if part.isdigit() and int(part) < len(seats):
            chosen.append(seats[int(part)])
        elif part in seats:
            chosen.append(part)
        else:
            raise ValueError(f"--seat {part!r} is not a seat of this env: {', '.join(seats)}")
    return chosen


def seatings(seats: list[str], spec: str, opponent: str) -> list[dict[str, str]]:
    """Per-game seatings, cycled over the games."""
    if opponent == SELF_PLAY:
        return [dict.fromkeys(seats, MODEL)]
    fixed = model_seats(spec, seats)
    groups = [[seat] for seat in seats] if fixed is None else [fixed]
    return [{seat: MODEL if seat in group else opponent for seat in seats} for group in groups]


def make_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """(rollout engine, tokenizer for token-level rendering or None), chosen as for
    single-agent envs (rllm_agents.cli.engine_choice)."""
    choice = choose_engine(args.model, args.engine, args.base_url)
    if choice.notice:
        print(f"{PROG}: {choice.notice}", file=sys.stderr)
    if args.slots is not None and choice.kind != LLAMACPP:
        raise ValueError(f"--slots: only the llama.cpp engine has slots (this run: {choice.kind})")
    if choice.kind == SERVED:
        return make_engine(
            "openai", base_url=args.base_url, model=args.model, api_key=args.api_key
        ), None
    if choice.kind == LLAMACPP:
        return make_engine("llamacpp", model=args.model, slots=args.slots, seed=args.seed), None
    if choice.kind == VLLM:
        engine = make_engine("vllm", model=args.model, seed=args.seed)
        return engine, engine.tokenizer
    engine = make_engine(
        "local", model=args.model, device=args.device, max_batch_size=args.parallel, seed=args.seed
    )
    return engine, engine.tokenizer


def make_policies(args: argparse.Namespace, engine: Any, tokenizer: Any) -> tuple[dict, list]:
    """The named policies, and the extra engines to close after the run."""
    sampling = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens
    )
    policies: dict[str, Any] = {MODEL: ModelPolicy(engine, MODEL, tokenizer, sampling)}
    extra = []
    if args.opponent.startswith("model:"):
        other = make_engine(
            "local", model=args.opponent.removeprefix("model:"), device=args.device, seed=args.seed
        )
        extra.append(other)
        policies[args.opponent] = ModelPolicy(
            other, args.opponent, other.tokenizer, sampling, trainable=False
        )
    elif args.opponent != SELF_PLAY:
        policies[args.opponent] = ScriptedPolicy(scripted_move(args.opponent), args.opponent)
    return policies, extra


def check(args: argparse.Namespace) -> None:
    if args.num_games < 1 or args.parallel < 1 or args.max_cycles < 1 or args.retries < 0:
        raise ValueError("--num-games, --parallel and --max-cycles must be at least 1, --retries 0")
    known = args.opponent in OPPONENTS or args.opponent == SELF_PLAY
    if not (known or args.opponent.startswith("model:")):
        raise ValueError(
            f"--opponent {args.opponent!r} is unknown; choose from "
            f"{', '.join(sorted(OPPONENTS))}, self or model:<name or dir>"
        )


async def evaluate(args: argparse.Namespace) -> tuple[list[Episode], dict[str, Any]]:
    """Run the games `args` describe; return the episodes and the summary."""
    check(args)
    module = multiagent_env_module(args.env)
    if module is None:
        raise ValueError(f"--env {args.env!r} is not a multi-agent env module")
    kwargs = json.loads(args.env_kwargs)
    if not isinstance(kwargs, dict):
        raise ValueError("--env-kwargs must be a JSON object")
    seats = env_seats(module, kwargs)
    plan = seatings(seats, args.seat, args.opponent)
    if args.output:
        args.output.mkdir(parents=True, exist_ok=True)
    engine, tokenizer = make_model(args)
    extra: list[Any] = []
    try:
        policies, extra = make_policies(args, engine, tokenizer)
        runner = multiagent_engine(
            ParallelEnvSpec(module.__name__, kwargs),
            policies,
            n_parallel=args.parallel,
            retry_limit=args.retries,
            timeout=args.timeout,
            max_cycles=args.max_cycles,
            output_path=args.output / "episodes.jsonl" if args.output else None,
            progress=False if args.no_progress else None,
        )
        seeds = [args.seed + i for i in range(args.num_games)]
        episodes = await runner.execute_tasks(game_tasks(seeds, plan))
    finally:
        for other in (engine, *extra):
            await other.aclose()
    summary = dict(runner.last_metrics)
    summary["games"] = len(episodes)
    summary["seats_of_env"] = seats
    summary["config"] = {
        key: str(value) if isinstance(value, Path) else value
        for key, value in vars(args).items()
        if key != "api_key"
    }
    if args.output:
        (args.output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return episodes, summary


def _rate(tally: dict[str, Any]) -> tuple[str, str]:
    """(rate, its 95 % interval): the win rate, or the success rate where no one wins."""
    key = "win_rate" if "win_rate" in tally else "success_rate"
    low, high = tally[f"{key}_ci"]
    return f"{tally[key]:.3f}", f"[{low:.3f}, {high:.3f}]"


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    config = summary["config"]
    console = Console(width=max(Console().width, 110))  # tables stay one line a row in logs
    for title, key in (("policy", "policies"), ("seat", "seats")):
        groups = summary.get(key, {})
        rate = "win rate" if all("win_rate" in t for t in groups.values()) else "success rate"
        table = Table(title=f"rllm-eval {config['env']} by {title}")
        for column in (title, "games", "W/D/L", rate, "95% CI", "reward", "invalid", "forfeits"):
            table.add_column(column, justify="left" if column == title else "right", no_wrap=True)
        for name, tally in groups.items():
            record = (
                f"{tally['wins']}/{tally['draws']}/{tally['losses']}" if "wins" in tally else "-"
            )
            table.add_row(
                name,
                str(tally["seats_played"]),
                record,
                *_rate(tally),
                f"{tally['mean_reward']:.3f}",
                str(tally["invalid_moves"]),
                str(tally["forfeits"]),
            )
        console.print(table)
    model = summary.get("policies", {}).get(MODEL)
    if model is not None:
        what = "win rate" if "win_rate" in model else "success rate"
        value, interval = _rate(model)
        console.print(
            f"{config['model']} vs {config['opponent']}: {what} {value} {interval} (95% Wilson) "
            f"over {model['seats_played']} seats in {summary['games']} games; "
            f"failures: {summary.get('failures') or 'none'}; wall time {summary['wall_time']:.1f}s"
        )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        episodes, summary = asyncio.run(evaluate(args))
    except (ValueError, ImportError, FileNotFoundError) as error:
        parser.error(str(error))  # exits with status 2
    print_summary(summary)
    if episodes and summary.get("finished_episodes", 0) == 0:
        first = next((e.error for e in episodes if e.error), "see episodes.jsonl")
        print(f"{PROG}: every game failed; the first: {first}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
