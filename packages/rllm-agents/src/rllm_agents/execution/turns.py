"""What the execution engine keeps of an episode as it plays, and the Episode it makes of it:
the live state of one run, the outcome of each turn on its step, the token sequence on its
trajectory, and how the episode ended.

These are the engine's pure parts (no env, no model); the multi-agent engine shares some.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rllm_agents.agents.base import BaseAgent
from rllm_agents.chat import TokenConversation, parse_tool_calls, tool_calls_to_text
from rllm_agents.chat.tool_calls import parse_openai_tool_calls
from rllm_agents.engines.base import ModelOutput
from rllm_agents.engines.weight_sync import record_policy_version
from rllm_agents.execution.compaction import CompactionRecord, ContextView
from rllm_agents.types import (
    EnvRecord,
    Episode,
    Step,
    TerminationReason,
    TokenSequence,
    Trajectory,
)


class EpisodeEnded(Exception):
    """Ends the turn loop early with a termination reason (budgets)."""

    def __init__(self, reason: TerminationReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


class ModelFailure(Exception):
    """The rollout engine raised (after its own retries); the env is fine and is kept."""


@dataclasses.dataclass
class EpisodeRun:
    """The live state of one episode (kept outside the coroutine so a timeout keeps it)."""

    index: int
    task: dict[str, Any] | None
    seed: int | None
    agent: BaseAgent
    conversation: TokenConversation | None = None
    last_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    reset_task_id: Any = None  # many envs name their task only in reset's info
    prompt_tokens: int = 0
    completion_tokens: int = 0
    env_reward: float = 0.0  # the env's rewards summed, for agents that do not record them
    env_record: EnvRecord | None = None
    started_at: float = dataclasses.field(default_factory=time.time)
    # What the model sees of the agent's history (compaction replaces its start).
    context: ContextView = dataclasses.field(default_factory=ContextView)
    compactions: list[CompactionRecord] = dataclasses.field(default_factory=list)


def build_episode(
    run: EpisodeRun, reason: TerminationReason, error: str | None, policy: Mapping[str, Any]
) -> Episode:
    """The Episode of a finished `run`, whatever ended it."""
    trajectory = run.agent.trajectory
    trajectory.task = run.task
    if not trajectory.reward and run.env_reward:  # an agent that keeps no rewards (rLLM's)
        trajectory.reward = run.env_reward
    record_tokens(trajectory, run.conversation)
    if run.compactions:
        trajectory.info["compactions"] = [record.to_dict() for record in run.compactions]
    steps = trajectory.steps
    task_key = task_key_of(run)
    return Episode(
        id=f"{task_key}:{run.index}",
        task=run.task if run.task is not None else {"seed": run.seed},
        termination_reason=reason,
        trajectories=[trajectory],
        is_correct=run.last_info.get("is_correct"),
        failure=run.last_info.get("failure"),
        error=error,
        metrics={
            "turns": float(len(steps)),
            "llm_time": sum(step.llm_time for step in steps),
            "queue_time": sum(step.queue_time for step in steps),
            "env_time": sum(step.env_time for step in steps),
            "prompt_tokens": float(run.prompt_tokens),
            "completion_tokens": float(run.completion_tokens),
            "compactions": float(len(run.compactions)),
        },
        info={"task_key": task_key, "seed": run.seed},
        env=run.env_record,
        policy=dict(policy),
        timings={"started_at": run.started_at, "finished_at": time.time()},
    )


def env_ending(info: dict[str, Any], terminated: bool, truncated: bool) -> TerminationReason | None:
    """How a step's result ends the episode, if it does (an env failure outranks the rest)."""
    if info.get("failure"):
        return TerminationReason.ENV_FAILURE
    if terminated:
        return TerminationReason.ENV_DONE
    if truncated:
        return TerminationReason.ENV_TRUNCATED
    return None


def record_outcome(step: Step, reward: float, done: bool, info: dict[str, Any]) -> None:
    """What the env said of a step, on the step, where the agent left it unset: rLLM-style
    agents record only the messages and leave rewards to the engine."""
    if not step.reward:
        step.reward = float(reward)
    step.done = step.done or done
    if not step.info:
        step.info = dict(info)


def record_tokens(trajectory: Trajectory, conversation: TokenConversation | None) -> None:
    """Put a token-in/token-out conversation on its trajectory: the whole token list when the
    conversation is prefix-consistent (one sequence holds every prompt the model saw), else
    each of its sequences (``trajectory.sequences``), and in any case how many it took."""
    if conversation is None or not conversation.segments:
        return
    trajectory.info["prefix_consistent"] = conversation.prefix_consistent
    trajectory.info["token_segments"] = len(conversation.segments)
    sequences = [
        TokenSequence(
            list(segment.prompt_ids),
            list(segment.response_ids),
            list(segment.response_mask),
            list(segment.response_logprobs),
        )
        for segment in conversation.segments
    ]
    if conversation.prefix_consistent:
        (only,) = sequences
        trajectory.prompt_ids = only.prompt_ids
        trajectory.response_ids = only.response_ids
        trajectory.response_mask = only.response_mask
        trajectory.response_logprobs = only.response_logprobs
    else:
        trajectory.sequences = sequences


def task_key_of(run: EpisodeRun) -> str:
    """What groups samples of the same task (for pass@k): the task id the env gave (in its last
    info, else in reset's), else the seed, else the position."""
    task_id = run.last_info.get("task_id", run.reset_task_id)
    if task_id is not None:
        return str(task_id)
    if run.task is None and run.seed is not None:
        return f"seed-{run.seed}"
    return str(run.index)


def response_text(output: ModelOutput) -> str:
    """The model's reply, with structured tool calls written as ``<tool_call>`` blocks."""
    text = output.text or ""
    if output.tool_calls and not parse_tool_calls(text):
        calls = tool_calls_to_text(parse_openai_tool_calls(output.tool_calls))
        text = f"{text}\n{calls}" if text else calls
    return text


def record_turn(step: Step, output: ModelOutput, prompt_ids: list[int], llm_time: float) -> None:
    step.prompt_ids = prompt_ids or list(output.prompt_ids)
    step.response_ids = list(output.completion_ids)
    step.logprobs = list(output.logprobs)
    step.finish_reason = output.finish_reason
    step.llm_time = llm_time
    step.queue_time = output.queue_time
    record_policy_version(step.info, output)


def episodes_to_jsonl(episodes: Iterable[Episode], path: str | Path) -> None:
    """Write episodes one JSON object a line."""
    with Path(path).open("w", encoding="utf-8") as sink:
        for episode in episodes:
            sink.write(json.dumps(episode.to_dict(), ensure_ascii=False) + "\n")
