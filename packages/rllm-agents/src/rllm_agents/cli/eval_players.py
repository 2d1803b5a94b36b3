"""Who plays ``rllm-eval``'s episodes: a ``BaseAgent`` class (``--agent``, else the env's
registered agent) or an agent program (``--agent-program`` / ``--agent-cmd``), each checked
before anything slow, and the runner that plays them with the run's settings."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm_agents.cli.engine_choice import LLAMACPP, SERVED, VLLM
from rllm_agents.cli.usage import UsageError
from rllm_agents.engines.base import SamplingParams


@dataclass(frozen=True)
class Player:
    """An agent class with its arguments, or an agent program."""

    agent_class: type | None = None
    agent_args: dict[str, Any] = field(default_factory=dict)
    program: Any = None

    def agent_factory(self) -> Callable[[], Any]:
        agent_class, arguments = self.agent_class, dict(self.agent_args)
        return lambda: agent_class(**arguments)


@dataclass(frozen=True)
class RunSettings:
    """What the run decided beyond its flags: the engine it chose and the episodes at once."""

    engine_kind: str  # engine_choice's SERVED, LLAMACPP or TRANSFORMERS
    parallel: int
    episodes_path: Path | None


def choose_player(args: argparse.Namespace) -> Player:
    """The program --agent-program / --agent-cmd names, else the agent class (--agent, or the
    env's registered one); a UsageError says what is wrong with either."""
    program = load_program(args)
    if program is not None:
        return Player(program=program)
    from rllm_agents.agents.registry import agent_args_for_env, agent_for_env

    agent_class = load_agent(args.agent) if args.agent else agent_for_env(args.env)
    given = json_object(args.agent_args, "--agent-args")
    # The env's defaults (what rllm-train plays it with) apply to its registered agent only.
    defaults = {} if args.agent else agent_args_for_env(args.env)
    return Player(agent_class=agent_class, agent_args={**defaults, **given})


def make_runner(
    args: argparse.Namespace,
    player: Player,
    env_factory: Callable[[], Any],
    model: Any,
    settings: RunSettings,
) -> Any:
    """The engine that plays `player`'s episodes on `model` (a ModelSetup) with the run's
    limits, scheduling, output and recording."""
    sampling = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens
    )
    output = dict(
        output_path=settings.episodes_path,
        output_append=args.resume,
        progress=False if args.no_progress else None,
    )
    if player.program is not None:
        return program_runner(args, player.program, env_factory, model, sampling, settings, output)
    from rllm_agents.execution.engine import AgentExecutionEngine
    from rllm_agents.execution.settings import EpisodeLimits, Recording, RunOutput, Scheduling

    return AgentExecutionEngine(
        player.agent_factory(),
        env_factory,
        model.engine,
        tokenizer=model.tokenizer,
        sampling=sampling,
        seed=args.seed,
        limits=EpisodeLimits(
            max_turns=args.max_turns,
            max_response_tokens=args.max_response_tokens,
            trajectory_timeout=args.timeout,
        ),
        scheduling=Scheduling(n_parallel=settings.parallel),
        output=RunOutput(**output),
        recording=Recording(
            record_env=not args.no_env_record, policy=policy_record(args, settings.engine_kind)
        ),
    )


def program_runner(
    args: argparse.Namespace,
    program: Any,
    env_factory: Callable[[], Any],
    model: Any,
    sampling: SamplingParams,
    settings: RunSettings,
    output: dict[str, Any],
) -> Any:
    """The program's runs, with the settings an agent's episodes get: --parallel at once,
    --timeout each, --temperature/--top-p/--max-tokens for what its calls leave unset, and
    answers graded by the env."""
    from rllm_agents.programs import ProgramExecutionEngine

    return ProgramExecutionEngine(
        program,
        model.engine,
        env_factory=env_factory,
        tokenizer=model.tokenizer,
        n_parallel=settings.parallel,
        timeout=args.timeout,
        sampling=sampling,
        gateway_processes=args.gateway_processes,
        **output,
    )


def policy_record(args: argparse.Namespace, engine_kind: str) -> dict[str, Any]:
    """Who plays, as each episode records it: the model's name and where it was served."""
    served_by = {SERVED: "openai", LLAMACPP: "llamacpp", VLLM: "vllm"}.get(engine_kind, "local")
    record: dict[str, Any] = {"name": args.model, "engine": served_by}
    if args.base_url:
        record["base_url"] = args.base_url
    return record


def load_program(args: argparse.Namespace) -> Any:
    """The agent program --agent-program / --agent-cmd names (None: a BaseAgent plays), checked
    before anything slow; a UsageError says what is wrong with it."""
    from rllm_agents.programs import ProgramSpecError, program_from_options

    try:
        program = program_from_options(args.agent_program or "", args.agent_cmd or "")
    except ProgramSpecError as error:
        raise UsageError(f"{program_flag(args)}: {error}") from error
    if args.gateway_processes and (program is None or not args.base_url):
        raise UsageError(
            "--gateway-processes serves an agent program (--agent-program / --agent-cmd) "
            "against a model server (--base-url): a model in this process cannot be copied"
        )
    if args.gateway_processes < 0:
        raise UsageError(f"--gateway-processes must be 0 or more, got {args.gateway_processes}")
    if program is not None and args.max_response_tokens is not None:
        raise UsageError(
            f"--max-response-tokens: an agent program's calls are its own; bound each one "
            f"with --max-tokens ({program_flag(args)})"
        )
    return program


def program_flag(args: argparse.Namespace) -> str:
    return "--agent-cmd" if args.agent_cmd else "--agent-program"


def load_agent(path: str) -> type:
    """The agent class `path` ("module:Class") names, or a UsageError saying why not."""
    from rllm_envs.core.loading import LoadError, load_attr

    from rllm_agents.agents.base import BaseAgent

    try:
        agent_class = load_attr(path, what="--agent")
    except LoadError as error:
        raise UsageError(str(error)) from error
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
