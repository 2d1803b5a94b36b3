"""`RllmAgentLoop`: our agent + env loop as a verl agent loop (registered as ``rllm_agent``).

verl's ``AgentLoopWorker`` instantiates the loop once per sample and calls :meth:`run` with the
sample's data row. The loop rebuilds the episode from the row (env id, env kwargs, task, seed),
lets the agent talk to the model through verl's server manager token-in/token-out, and steps the
env with the agent's actions until the episode ends. Tokens are assembled with verl's own
Continuous Token builder (the model-family-aware renderer every verl agent loop uses), so the
training sequence is exactly what the rollout server saw:

    prompt_ids:    the first prompt (system + first observation + generation prompt)
    response_ids:  | model turn 1 | observation 2 + generation prompt | model turn 2 | ...
    response_mask: |  1 1 ... 1   |           0 0 ... 0              |  1 1 ... 1   | ...

The episode's reward (the sum of the env's rewards) is returned as ``reward_score``; verl puts
it on the last response token. An episode whose env reported an infrastructure failure keeps
its tokens but gets an all-zero response mask, so no gradient flows from a fake outcome.

Each episode also reports the trainer steps whose weights served its turns (``min_global_steps``
and ``max_global_steps``, as verl's own loops do): under verl's asynchronous trainers a turn may
come from an older policy than the one being trained, and verl counts how stale each batch is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from rllm_agents.execution import env_ending
from rllm_agents.types import TerminationReason
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from rllm_train.verl.compose import AGENT_LOOP_NAME
from rllm_train.verl.data import EpisodeSource, from_verl_row
from rllm_train.verl.engine_server import REPLICA_FIELD
from rllm_train.verl.episode_parts import make_agent, make_env

logger = logging.getLogger(__name__)
# The weights version reported for an episode that never reached the model (it failed before its
# first turn): verl's staleness statistics need a number, and such an episode trains nothing.
NO_MODEL_TURN_VERSION = -1


class PrefixBrokenError(RuntimeError):
    """The agent rewrote earlier messages, so the next prompt no longer extends the last one."""


@dataclass
class TokenRecord:
    """The growing token sequence of one episode and the per-token training metadata."""

    runtime_ids: list[int]
    prompt_length: int
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] | None = field(default_factory=list)

    @property
    def response_length(self) -> int:
        return len(self.runtime_ids) - self.prompt_length


@dataclass
class EpisodeOutcome:
    rewards: list[float] = field(default_factory=list)
    termination: TerminationReason = TerminationReason.MAX_TURNS
    failure: str | None = None  # set: not the agent's fault, so no reward and no loss
    error: str | None = None
    is_correct: bool | None = None
    turns: int = 0
    llm_seconds: float = 0.0
    env_seconds: float = 0.0
    # The trainer step whose weights served each model turn, as the rollout server reports it.
    weight_versions: list[int] = field(default_factory=list)
    # [replica, weights version] of each model turn, where the server names its replica.
    served_by: list[list[int]] = field(default_factory=list)

    def version_span(self) -> tuple[int, int]:
        """(oldest, newest) weights version among the model turns."""
        if not self.weight_versions:
            return NO_MODEL_TURN_VERSION, NO_MODEL_TURN_VERSION
        return min(self.weight_versions), max(self.weight_versions)

    def end(self, reason: TerminationReason, *, failure: str | None = None) -> None:
        self.termination, self.failure = reason, failure


@dataclass
class EpisodeState:
    """What an episode has built so far; kept outside the coroutine so a timeout keeps it."""

    record: TokenRecord = field(
        default_factory=lambda: TokenRecord(runtime_ids=[], prompt_length=0)
    )
    outcome: EpisodeOutcome = field(default_factory=EpisodeOutcome)
    env: Any = None

    # Both run on the episode's env thread; the env is recorded there, not in the coroutine,
    # so it is known (and closed) even if the coroutine was cancelled while it was being made.
    def make_env(self, source: EpisodeSource):
        self.env = make_env(source)
        return self.env

    def close_env(self) -> None:
        if self.env is not None:
            self.env.close()


def appended_context(
    previous: list[dict[str, Any]], updated: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The conversation the next prompt extends: the last prompt plus the agent's reply to it."""
    if updated[: len(previous)] != previous or len(updated) <= len(previous):
        raise PrefixBrokenError(
            "the agent's next conversation does not extend the previous one (it rewrote or dropped "
            "earlier messages); token-in/token-out training needs an append-only history"
        )
    if updated[len(previous)].get("role") != "assistant":
        raise PrefixBrokenError(
            "the agent did not record the model's reply as an assistant message after the prompt"
        )
    return updated[: len(previous) + 1]


@register(AGENT_LOOP_NAME)
class RllmAgentLoop(AgentLoopBase):
    """Runs one rllm episode per verl sample (see the module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        source = from_verl_row(kwargs)
        state = EpisodeState()
        # One thread per episode for every env call: blocking envs stay off the event loop,
        # and envs that are not thread-safe always see the same thread.
        env_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rllm-env")
        timed_out = False
        try:
            await asyncio.wait_for(
                self._run_episode(source, state, env_thread, sampling_params),
                timeout=source.timeout_s,
            )
        except asyncio.TimeoutError:
            timed_out = True
            state.outcome.end(TerminationReason.TIMEOUT, failure="timeout")
        except Exception as error:  # noqa: BLE001 - one broken episode must not sink the batch
            logger.exception("rllm episode %s (seed %s) failed", source.env_id, source.seed)
            state.outcome.end(TerminationReason.ERROR, failure=f"error: {type(error).__name__}")
            state.outcome.error = str(error)
        finally:
            # Queued behind whatever the env thread still runs, so an env that was still being
            # made or stepped when time ran out is closed too, once that call returns.
            closing = env_thread.submit(state.close_env)
            if not timed_out:  # a timed-out env may still be stuck in step(): don't wait
                await asyncio.wrap_future(closing)
            env_thread.shutdown(wait=False)
        return self._output(state.record, state.outcome)

    async def _on_env_thread(
        self, env_thread: ThreadPoolExecutor, outcome: EpisodeOutcome, call, *args
    ):
        started = time.perf_counter()
        try:
            return await self.loop.run_in_executor(env_thread, call, *args)
        finally:
            outcome.env_seconds += time.perf_counter() - started

    async def _run_episode(self, source: EpisodeSource, state, env_thread, sampling_params) -> None:
        outcome, record = state.outcome, state.record
        env = await self._on_env_thread(env_thread, outcome, state.make_env, source)
        agent = make_agent(source)
        options = {"task": dict(source.task)} if source.task is not None else None
        observation, info = await self._on_env_thread(
            env_thread, outcome, lambda: env.reset(seed=source.seed, options=options)
        )
        agent.reset()
        agent.update_from_env(observation, 0.0, False, info)
        messages = list(agent.chat_completions)
        record.runtime_ids = await self.ct_build_initial_tokens(messages, tools=agent.tools)
        record.prompt_length = len(record.runtime_ids)
        if info.get("failure"):
            outcome.end(TerminationReason.ENV_FAILURE, failure=str(info["failure"]))
            return
        request_id = uuid4().hex  # one id per episode keeps its turns on one server (prefix cache)
        response_budget = self.rollout_config.response_length
        for turn in range(source.max_turns):
            remaining = response_budget - record.response_length
            if remaining <= 0:
                outcome.end(TerminationReason.RESPONSE_TOO_LONG)
                break
            budget = min(remaining, source.max_tokens_per_turn or remaining)
            completion = await self._generate(record, request_id, sampling_params, budget, outcome)
            text = self.tokenizer.decode(completion, skip_special_tokens=True)
            action = agent.update_from_model(text)
            observation, reward, terminated, truncated, info = await self._on_env_thread(
                env_thread, outcome, env.step, action.action
            )
            outcome.rewards.append(float(reward))
            outcome.turns = turn + 1
            if "is_correct" in info:
                outcome.is_correct = bool(info["is_correct"])
            agent.update_from_env(observation, float(reward), bool(terminated or truncated), info)
            ended = env_ending(info, terminated, truncated)
            if ended is None and turn + 1 == source.max_turns:
                ended = TerminationReason.MAX_TURNS
            if ended is not None:
                outcome.end(ended, failure=str(info["failure"]) if info.get("failure") else None)
                break
            updated = list(agent.chat_completions)
            previous = appended_context(messages, updated)
            merge, record.response_mask, record.response_logprobs = await self.ct_merge_context_msg(
                previous,
                updated,
                record.runtime_ids,
                record.response_mask,
                record.response_logprobs,
                tools=agent.tools,
            )
            record.runtime_ids = merge.token_ids
            messages = updated

    async def _generate(
        self, record: TokenRecord, request_id: str, sampling_params, budget: int, outcome
    ):
        started = time.perf_counter()
        output = await self.server_manager.generate(
            request_id=request_id,
            prompt_ids=record.runtime_ids,
            sampling_params={**sampling_params, "max_tokens": budget},
        )
        outcome.llm_seconds += time.perf_counter() - started
        # verl's client spans a turn resumed after a weight sync with min/max; a plain server
        # reply carries one version.
        for key in ("min_global_steps", "max_global_steps", "global_steps"):
            if output.extra_fields.get(key) is not None:
                outcome.weight_versions.append(int(output.extra_fields[key]))
        replica = output.extra_fields.get(REPLICA_FIELD)
        if replica is not None:
            version = output.extra_fields.get("global_steps", NO_MODEL_TURN_VERSION)
            outcome.served_by.append([int(replica), int(version)])
        token_ids = list(output.token_ids)
        logprobs = list(output.log_probs) if output.log_probs else None
        if logprobs is None:
            record.response_logprobs = None  # a server without logprobs: verl recomputes them
        merge, record.response_mask, record.response_logprobs = await self.ct_merge_assistant_token(
            record.runtime_ids,
            token_ids,
            record.response_mask,
            record.response_logprobs,
            assistant_logprobs=logprobs if record.response_logprobs is not None else None,
        )
        record.runtime_ids = merge.token_ids
        return token_ids

    def _output(self, record: TokenRecord, outcome: EpisodeOutcome) -> AgentLoopOutput:
        limit = self.rollout_config.response_length
        response_ids = record.runtime_ids[record.prompt_length :][:limit]
        response_mask = record.response_mask[:limit]
        if outcome.failure is not None:
            response_mask = [0] * len(response_mask)
        logprobs = (
            record.response_logprobs[:limit] if record.response_logprobs is not None else None
        )
        oldest, newest = outcome.version_span()
        return AgentLoopOutput(
            prompt_ids=record.runtime_ids[: record.prompt_length],
            response_ids=response_ids,
            response_mask=response_mask,
            response_logprobs=logprobs,
            reward_score=0.0 if outcome.failure is not None else float(sum(outcome.rewards)),
            num_turns=2 * outcome.turns + 1,
            metrics={"generate_sequences": outcome.llm_seconds, "tool_calls": outcome.env_seconds},
            extra_fields={
                "turn_scores": list(outcome.rewards),
                "tool_rewards": [],
                "rllm_termination": outcome.termination.value,
                "rllm_failure": outcome.failure,
                "rllm_error": outcome.error,
                "rllm_is_correct": outcome.is_correct,
                "min_global_steps": oldest,
                "max_global_steps": newest,
                "rllm_served_by": list(outcome.served_by),
            },
        )
