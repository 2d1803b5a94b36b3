"""The trainer's rollouts: lockstep rounds are reproducible bit for bit, whatever the timing.

Env steps that take random time make requests reach the local engine in a different order on
every run. With lockstep dispatch each round still runs as the same batch, so tokens *and*
log-probs repeat exactly; with async dispatch the per-request seeds still give the same tokens
(only the floating-point noise of differently composed batches remains in the log-probs).
"""

from __future__ import annotations

import random
import time

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401  (registers the rllm/ ids)
import torch
from rllm_agents.agents.registry import agent_for_env
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.local import LocalEngine
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.types import TerminationReason
from rllm_train.config import build_config
from rllm_train.native.models import load_policy

ENV_ID = "rllm/FrozenLake-v0"
SEEDS = [3, 3, 5, 5, 7, 7, 9, 9]


class Jittery(gym.Wrapper):
    """The env with steps of random duration, on a worker thread (not inline-safe)."""

    metadata = {"render_modes": []}

    def __init__(self, env: gym.Env, hang_on_seed: int | None = None) -> None:
        super().__init__(env)
        self.hang_on_seed = hang_on_seed
        self.seed = None

    def reset(self, *, seed=None, options=None):
        self.seed = seed
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        time.sleep(5.0 if self.seed == self.hang_on_seed else random.random() * 0.02)
        return self.env.step(action)


@pytest.fixture(scope="module")
def engine(tiny_model):
    model, tokenizer, _ = load_policy(
        build_config(overrides={"model.name": tiny_model}).model, torch.device("cpu")
    )
    engine = LocalEngine(model, tokenizer, max_batch_size=len(SEEDS))
    yield engine
    engine.close()


def rollout(engine, dispatch: str, hang_on_seed: int | None = None, timeout=None):
    executor = AgentExecutionEngine(
        agent_for_env(ENV_ID),
        lambda: Jittery(gym.make(ENV_ID), hang_on_seed),
        engine,
        tokenizer=engine.tokenizer,
        max_turns=3,
        sampling=SamplingParams(temperature=1.0, max_tokens=6),
        seed=None,
        progress=False,
        dispatch=dispatch,
        sampling_seed=1234,
        trajectory_timeout=timeout,
    )
    return executor.run(seeds=SEEDS)


def tokens_and_logprobs(episodes):
    return [
        (t.prompt_ids, t.response_ids, t.response_mask, t.response_logprobs)
        for episode in episodes
        for t in episode.trajectories
    ]


def test_lockstep_rounds_repeat_bit_for_bit(engine):
    first, second = (tokens_and_logprobs(rollout(engine, "lockstep")) for _ in range(2))
    assert first == second
    # Episodes of the same task sample differently: each request has its own seed.
    assert first[0][1] != first[1][1]
    # Async dispatch: other batches, the same draws, so the same tokens.
    asynchronous = tokens_and_logprobs(rollout(engine, "async"))
    assert [row[:3] for row in asynchronous] == [row[:3] for row in first]


def test_a_stuck_episode_times_out_without_holding_the_round(engine):
    started = time.monotonic()
    episodes = rollout(engine, "lockstep", hang_on_seed=5, timeout=1.5)
    assert time.monotonic() - started < 10
    reasons = [episode.termination_reason for episode in episodes]
    assert reasons[2:4] == [TerminationReason.TIMEOUT] * 2
    finished = [reason for i, reason in enumerate(reasons) if i not in (2, 3)]
    assert all(r in (TerminationReason.MAX_TURNS, TerminationReason.ENV_DONE) for r in finished)
