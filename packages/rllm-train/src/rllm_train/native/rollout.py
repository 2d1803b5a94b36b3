"""Lockstep rollouts: every (agent, env) pair of a training step advances one turn at a time,
with all pending model turns sampled as one batch.

Each conversation is kept token-in/token-out: the prompt of turn k+1 is the exact token list of
turn k's prompt and completion, extended by the chat template's rendering of the new messages
(the env's reply, the next generation prompt). Those in-between tokens are written by the env
and the template, not the model, so ``response_mask`` is 0 on them. When the template does not
extend its own earlier rendering (it rewrites history), the conversation is re-rendered from
that turn and ``info["prefix_breaks"]`` counts it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from rllm_agents.agents.base import BaseAgent
from rllm_agents.types import Episode, Step, TerminationReason, Trajectory

from rllm_train.native.sampling import sample_batch, stop_token_ids


@dataclass(frozen=True)
class RolloutSettings:
    max_turns: int = 1
    max_response_tokens: int = 64
    max_prompt_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class _Conversation:
    """One running episode: its env, agent and the token sequence so far."""

    env: gym.Env
    agent: BaseAgent
    seed: int
    task_id: str = ""
    rendered_text: str = ""  # the text the token list below renders
    prompt_ids: list[int] = field(default_factory=list)  # the first turn's prompt
    response_ids: list[int] = field(default_factory=list)  # everything after it
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    turns: int = 0
    done: bool = False
    ending: TerminationReason | None = None
    failure: str | None = None
    is_correct: bool | None = None
    prefix_breaks: int = 0
    env_seconds: float = 0.0

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids


@dataclass
class RolloutTimings:
    generate_seconds: float = 0.0
    env_seconds: float = 0.0


def _render(tokenizer, messages: list[dict[str, Any]], tools: Any) -> str:
    return tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False
    )


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _extend_prompt(conversation: _Conversation, tokenizer) -> None:
    """Append the tokens of the messages added since the last model turn (env tokens)."""
    text = _render(tokenizer, conversation.agent.chat_completions, conversation.agent.tools)
    if not conversation.prompt_ids:
        conversation.prompt_ids = _encode(tokenizer, text)
    elif text.startswith(conversation.rendered_text):
        new_ids = _encode(tokenizer, text[len(conversation.rendered_text) :])
        conversation.response_ids += new_ids
        conversation.response_mask += [0] * len(new_ids)
        conversation.response_logprobs += [0.0] * len(new_ids)
    else:
        # The template rewrote earlier turns: restart the token list from this rendering.
        conversation.prefix_breaks += 1
        conversation.prompt_ids = _encode(tokenizer, text)
        conversation.response_ids, conversation.response_mask = [], []
        conversation.response_logprobs = []
    conversation.rendered_text = text


def _record_env_result(
    conversation: _Conversation,
    observation: Any,
    reward: float,
    terminated: bool,
    truncated: bool,
    info: dict[str, Any],
) -> None:
    conversation.reward += float(reward)
    if "is_correct" in info:
        conversation.is_correct = bool(info["is_correct"])
    if info.get("failure"):
        conversation.failure = str(info["failure"])
        conversation.done, conversation.ending = True, TerminationReason.ENV_FAILURE
    elif terminated or truncated:
        conversation.done = True
        conversation.ending = (
            TerminationReason.ENV_DONE if terminated else TerminationReason.ENV_TRUNCATED
        )
    conversation.agent.update_from_env(observation, float(reward), conversation.done, info)


def _to_episode(conversation: _Conversation) -> Episode:
    trajectory: Trajectory = conversation.agent.trajectory
    trajectory.reward = conversation.reward
    trajectory.prompt_ids = list(conversation.prompt_ids)
    trajectory.response_ids = list(conversation.response_ids)
    trajectory.response_mask = list(conversation.response_mask)
    trajectory.response_logprobs = list(conversation.response_logprobs)
    trajectory.info["prefix_breaks"] = conversation.prefix_breaks
    return Episode(
        id=f"{conversation.task_id}:{conversation.seed}",
        task={"task_id": conversation.task_id, "seed": conversation.seed},
        termination_reason=conversation.ending,
        trajectories=[trajectory],
        is_correct=conversation.is_correct,
        failure=conversation.failure,
        metrics={"turns": conversation.turns, "env_time": conversation.env_seconds},
        info={"task_key": conversation.task_id, "seed": conversation.seed},
    )


def run_rollouts(
    model,
    tokenizer,
    env_factory: Callable[[], gym.Env],
    agent_factory: Callable[[], BaseAgent],
    seeds: list[int],
    settings: RolloutSettings,
    timings: RolloutTimings | None = None,
) -> list[Episode]:
    """One Episode per seed, in order; env reset with that seed (so equal seeds = same task)."""
    timings = timings if timings is not None else RolloutTimings()
    stop_ids = stop_token_ids(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    conversations = []
    try:
        for seed in seeds:
            env, agent = env_factory(), agent_factory()
            conversation = _Conversation(env=env, agent=agent, seed=seed)
            conversations.append(conversation)
            agent.reset()
            started = time.perf_counter()
            observation, info = env.reset(seed=seed)
            conversation.env_seconds += time.perf_counter() - started
            conversation.task_id = str(info.get("task_id", seed))
            agent.update_from_env(observation, 0.0, False, info)
            if info.get("failure"):
                conversation.failure = str(info["failure"])
                conversation.done, conversation.ending = True, TerminationReason.ENV_FAILURE
        _play(model, tokenizer, conversations, settings, timings, stop_ids, pad_id)
        return [_to_episode(conversation) for conversation in conversations]
    finally:
        for conversation in conversations:
            conversation.env.close()


def _play(model, tokenizer, conversations, settings, timings, stop_ids, pad_id) -> None:
    for _turn in range(settings.max_turns):
        active = [c for c in conversations if not c.done]
        for conversation in active:
            _extend_prompt(conversation, tokenizer)
            if len(conversation.token_ids) > settings.max_prompt_tokens:
                conversation.done, conversation.ending = True, TerminationReason.PROMPT_TOO_LONG
        active = [c for c in active if not c.done]
        if not active:
            return
        started = time.perf_counter()
        completions = sample_batch(
            model,
            [c.token_ids for c in active],
            max_new_tokens=settings.max_response_tokens,
            temperature=settings.temperature,
            top_p=settings.top_p,
            stop_ids=stop_ids,
            pad_id=pad_id,
        )
        timings.generate_seconds += time.perf_counter() - started
        for conversation, completion in zip(active, completions, strict=True):
            _apply_completion(conversation, completion, tokenizer, timings)
    for conversation in conversations:
        if not conversation.done:
            conversation.done, conversation.ending = True, TerminationReason.MAX_TURNS


def _apply_completion(conversation, completion, tokenizer, timings) -> None:
    turn_prompt = conversation.token_ids
    conversation.response_ids += completion.token_ids
    conversation.response_mask += [1] * len(completion.token_ids)
    conversation.response_logprobs += completion.logprobs
    conversation.turns += 1
    # The text as the template renders it back: special tokens kept, so the next rendering
    # can be checked to extend it.
    conversation.rendered_text += tokenizer.decode(completion.token_ids, skip_special_tokens=False)
    text = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
    action = conversation.agent.update_from_model(text)
    step: Step | None = conversation.agent.get_current_state()
    if step is not None:
        step.prompt_ids, step.response_ids = list(turn_prompt), list(completion.token_ids)
        step.logprobs = list(completion.logprobs)
        step.finish_reason = "stop" if completion.finished else "length"
    started = time.perf_counter()
    observation, reward, terminated, truncated, info = conversation.env.step(action.action)
    elapsed = time.perf_counter() - started
    conversation.env_seconds += elapsed
    timings.env_seconds += elapsed
    _record_env_result(conversation, observation, reward, terminated, truncated, info)
