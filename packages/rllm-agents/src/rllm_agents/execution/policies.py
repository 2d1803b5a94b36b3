"""Policies: what plays a seat of a multi-agent env - a model behind a rollout engine, or code.

A policy is named (episodes record which policy played which seat), says whether it is being
trained (``trainable``: a trainer learns from its seats' trajectories only), makes the agent
that keeps a seat's conversation, and answers a seat's turn:

* :class:`ModelPolicy`: a rollout engine (the local engine, an OpenAI-compatible server, ...).
  With a ``tokenizer`` each seat's conversation is rendered token-in/token-out by
  :class:`~rllm_agents.chat.TokenConversation`, as the single-agent execution engine does,
  so the seat's trajectory holds the token ids, logprobs and mask a trainer needs.
  Several seats may share one policy (self-play) and several policies one engine.
  With a ``sampling_seed`` each request is sampled with its own seed, from (sampling seed,
  episode, seat, turn), as the single-agent engine seeds its requests: what a seat draws does
  not depend on which other requests share its batch.
* :class:`ScriptedPolicy`: a function of the seat's observation and info (random legal moves,
  a heuristic, an oracle), seeded per episode and seat.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from rllm_agents.agents.base import BaseAgent
from rllm_agents.agents.text_agent import TextAgent
from rllm_agents.chat import TokenConversation, encode
from rllm_agents.engines.base import ModelOutput, SamplingParams
from rllm_agents.execution.dispatch import request_seed

ChooseMove = Callable[[Any, dict[str, Any], np.random.Generator], str]


@dataclass
class SeatPlay:
    """One seat's live state in one episode (what a policy reads and the engine records)."""

    seat: str
    policy: Policy
    agent: BaseAgent
    rng: np.random.Generator
    episode: str = ""  # the episode's id, unique within a run (seeds its requests)
    conversation: TokenConversation | None = None
    observation: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    pending_reward: float = 0.0  # earned since the seat last acted
    total_reward: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    done: bool = False


@dataclass
class Response:
    """A policy's answer to one turn."""

    output: ModelOutput
    prompt_ids: list[int] = field(default_factory=list)
    llm_time: float = 0.0


class Policy(Protocol):
    name: str
    trainable: bool

    def new_agent(self) -> BaseAgent:
        """The agent that keeps one seat's conversation for one episode."""

    def start(self, seat: SeatPlay) -> None:
        """Prepare `seat` for a new episode (e.g. its token conversation)."""

    async def respond(self, seat: SeatPlay) -> Response:
        """Answer the seat's turn (its agent holds the conversation so far)."""


@dataclass
class ModelPolicy:
    """A model behind a rollout engine (see the module docstring)."""

    engine: Any
    name: str = "model"
    tokenizer: Any = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    agent_factory: Callable[[], BaseAgent] = TextAgent
    trainable: bool = True
    sampling_seed: int | None = None

    def new_agent(self) -> BaseAgent:
        return self.agent_factory()

    def start(self, seat: SeatPlay) -> None:
        if self.tokenizer is not None:
            seat.conversation = TokenConversation(self.tokenizer, tools=seat.agent.tools)

    async def respond(self, seat: SeatPlay) -> Response:
        messages = seat.agent.chat_completions
        sampling = self.sampling
        if self.sampling_seed is not None:
            turn = f"{seat.seat}/{len(seat.agent.trajectory.steps)}"
            seed = request_seed(self.sampling_seed, seat.episode, turn)
            sampling = dataclasses.replace(sampling, seed=seed)
        started = time.perf_counter()
        if seat.conversation is None:
            output = await self.engine.generate(messages, sampling=sampling)
            prompt_ids: list[int] = []
        else:
            prompt_ids = list(seat.conversation.prompt_ids(messages))
            output = await self.engine.generate(prompt_ids=prompt_ids, sampling=sampling)
            completion_ids = list(output.completion_ids) or encode(self.tokenizer, output.text)
            seat.conversation.add_completion(completion_ids, list(output.logprobs) or None)
            output.completion_ids = completion_ids
        seat.prompt_tokens += len(prompt_ids) or output.prompt_length
        seat.completion_tokens += output.completion_length or len(output.logprobs)
        return Response(output, prompt_ids, time.perf_counter() - started)


@dataclass
class ScriptedPolicy:
    """Code that plays a seat: ``choose(observation, info, rng) -> reply text``."""

    choose: ChooseMove
    name: str = "scripted"
    trainable: bool = False
    agent_factory: Callable[[], BaseAgent] = TextAgent

    def new_agent(self) -> BaseAgent:
        return self.agent_factory()

    def start(self, seat: SeatPlay) -> None:
        """Nothing to prepare: the seat's generator is already seeded."""

    async def respond(self, seat: SeatPlay) -> Response:
        return Response(ModelOutput(text=self.choose(seat.observation, seat.info, seat.rng)))
