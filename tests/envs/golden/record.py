"""Record the golden trajectories: a few scripted steps of every shipped env, no model.

    python -m tests.envs.golden.record                 # every env (skips what cannot run here)
    python -m tests.envs.golden.record rllm/Math-v0 tictactoe_v0

Each env is played through the real recording path - the execution engine with the env's
registered agent for Gymnasium ids, the multi-agent workflow engine for PettingZoo modules -
so a golden file is an ordinary episode file (docs/agents/episodes.md). Single-agent envs get their
replies from :class:`ScriptedEngine` (the script may read the task the seed draws, to give a
right answer as well as wrong and malformed ones); multi-agent envs are played by the seeded
``random`` scripted player on every seat. tests/envs/test_golden_replay.py replays each file:
when an env's behaviour changes on purpose, record its file again with this script and
commit it with the change (and bump the env's version if its rewards or tasks changed).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm_agents.engines.base import ModelOutput, SamplingParams
from rllm_agents.episodes.records import episodes_text
from rllm_agents.types import Episode

GOLDEN_DIR = Path(__file__).parent
SEED = 7

Replies = Callable[[dict[str, Any]], list[str]]


@dataclass(frozen=True)
class SingleAgentScript:
    """A Gymnasium id played for len(replies) turns at most, with these make kwargs."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    replies: Replies = lambda task: []  # noqa: E731 - a default that reads as data


@dataclass(frozen=True)
class MultiAgentScript:
    """A PettingZoo module played by the seeded random player on every seat."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    max_cycles: int = 8


def _answer(task: dict[str, Any]) -> str:
    return str(task.get("answer", ""))


SINGLE_AGENT: dict[str, SingleAgentScript] = {
    "rllm/FrozenLake-v0": SingleAgentScript(
        {}, lambda task: ["`Left`", "I fly over the lake", "`Up`", "`Right`"]
    ),
    # Wrong, then no boxed answer (the format penalty), then right: every reward and message.
    "rllm/Math-v0": SingleAgentScript(
        {"max_turns": 3, "format_penalty": 0.1},
        lambda task: ["\\boxed{-1}", "no answer", f"So \\boxed{{{_answer(task)}}}"],
    ),
    "rllm/GymText-v0": SingleAgentScript({}, lambda task: ["`0`", "Action: 1", "left!", "`1`"]),
    "rllm/Arithmetic-v0": SingleAgentScript(
        {}, lambda task: [f"{task['a']} + {task['b']} = {int(task['a']) + int(task['b'])}"]
    ),
    # Right, then wrong, then no number: each turn's verdict and the true total to go on from.
    "rllm/RunningTotal-v0": SingleAgentScript(
        {},
        lambda task: [
            f"{task['start']} + {task['addends'][0]} = {task['start'] + task['addends'][0]}",
            "0",
            "I lost count",
        ],
    ),
    # No grader: the reward stays 0 whatever the reply (a judge scores it from outside).
    "rllm/OpenEnded-v0": SingleAgentScript({}, lambda task: ["A banana is yellow."]),
    "rllm/Code-v0": SingleAgentScript(
        {"max_turns": 2},
        lambda task: ["no code", "```python\nprint(input())\n```"],
    ),
    "rllm/MCP-v0": SingleAgentScript(
        {"max_turns": 3},
        lambda task: [
            '<tool_call>{"name": "search", "arguments": {"query": "capital"}}</tool_call>',
            "<answer>I do not know</answer>",
        ],
    ),
    "rllm/Web-v0": SingleAgentScript(
        {"max_turns": 3}, lambda task: ['scroll("down")', "click(e1)", 'answer("done")']
    ),
    # A look around, then an untouched submit: the task's tests give 0.
    "rllm/Harbor-v0": SingleAgentScript(
        {"max_turns": 2},
        lambda task: [
            '<tool_call>{"name": "bash", "arguments": {"command": "ls -R"}}</tool_call>',
            '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
        ],
    ),
    "rllm/SWE-v0": SingleAgentScript(
        {"max_turns": 2},
        lambda task: [
            '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>',
            '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
        ],
    ),
}

MULTI_AGENT: dict[str, MultiAgentScript] = {
    "tictactoe_v0": MultiAgentScript(max_cycles=9),
    "kuhn_poker_v0": MultiAgentScript(),
    "referential_v0": MultiAgentScript(max_cycles=4),
    "solver_judge_v0": MultiAgentScript(),
    "classic_v0": MultiAgentScript({"game": "connect_four_v3"}, max_cycles=6),
}


def golden_path(name: str) -> Path:
    """Where `name`'s (an env id or module) golden file lives."""
    return GOLDEN_DIR / f"{name.replace('rllm/', '').replace('/', '_')}.jsonl"


class ScriptedEngine:
    """A rollout engine that answers turn t of every episode with replies[t] (the turn is the
    number of assistant messages so far): a model stand-in whose every reply is known."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        turn = sum(message.get("role") == "assistant" for message in messages or [])
        return ModelOutput(self.replies[min(turn, len(self.replies) - 1)])

    async def aclose(self) -> None:
        """Nothing to release."""


def seeded_task(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The task row SEED draws (empty for envs without rows), for scripts that answer it."""
    from rllm_agents.execution.env_spec import EnvSpec

    env = EnvSpec(env_id, kwargs)()
    try:
        env.reset(seed=SEED)
        return dict(getattr(env.unwrapped, "task", None) or {})
    finally:
        env.close()


def record_single(env_id: str, script: SingleAgentScript) -> Episode:
    from rllm_agents.agents.registry import agent_for_env
    from rllm_agents.execution import AgentExecutionEngine
    from rllm_agents.execution.env_spec import EnvSpec

    replies = script.replies(seeded_task(env_id, script.kwargs))
    engine = AgentExecutionEngine(
        agent_for_env(env_id),
        EnvSpec(env_id, script.kwargs),
        ScriptedEngine(replies),
        max_turns=len(replies),
        seed=SEED,
        progress=False,
        policy={"name": "scripted", "version": "golden"},
    )
    [episode] = engine.run(seeds=[SEED])
    return episode


def record_multi(module: str, script: MultiAgentScript) -> Episode:
    from rllm_agents.agents.opponents import scripted_move
    from rllm_agents.execution.env_spec import ParallelEnvSpec
    from rllm_agents.execution.multiagent import game_tasks, multiagent_engine
    from rllm_agents.execution.policies import ScriptedPolicy

    engine = multiagent_engine(
        ParallelEnvSpec(f"rllm_envs.multiagent.{module}", script.kwargs),
        {"random": ScriptedPolicy(scripted_move("random"), "random")},
        max_cycles=script.max_cycles,
        retry_limit=0,
        progress=False,
    )
    [episode] = asyncio.run(engine.execute_tasks(game_tasks([SEED])))
    return episode


def record(name: str) -> Path:
    """Record `name`'s golden file (an env id or a multi-agent module); returns its path."""
    if name in SINGLE_AGENT:
        episode = record_single(name, SINGLE_AGENT[name])
    elif name in MULTI_AGENT:
        episode = record_multi(name, MULTI_AGENT[name])
    else:
        raise SystemExit(f"no golden script for {name!r}; known: {', '.join(ALL_NAMES)}")
    if episode.error or episode.failure:
        raise RuntimeError(
            f"{name}: the scripted episode failed: {episode.error or episode.failure}"
        )
    path = golden_path(name)
    path.write_text(episodes_text([episode]), encoding="utf-8")
    return path


ALL_NAMES = (*SINGLE_AGENT, *MULTI_AGENT)


def main(argv: list[str]) -> int:
    failed = []
    for name in argv or ALL_NAMES:
        try:
            path = record(name)
        except (ImportError, RuntimeError, OSError) as error:
            failed.append(name)
            print(f"{name}: not recorded: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        print(f"{name}: {path} ({path.stat().st_size} bytes)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
