"""The trainer's rollouts: lockstep rounds are reproducible bit for bit, whatever the timing.

Env steps that take random time make requests reach the local engine in a different order on
every run. With lockstep dispatch each round still runs as the same batch, so tokens *and*
log-probs repeat exactly. (With async dispatch batches form as requests arrive; the per-request
seeds keep the draws, but the floating-point noise of differently composed batches can tip a
draw across a token boundary - on a GPU it does, within one rollout of the tiny model.)
"""

from __future__ import annotations

import random
import threading
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
    """The env with steps of random duration, on a worker thread (not inline-safe).

    With `hang_on_seed`, the episodes of that seed hang in their step until `released` is set.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        env: gym.Env,
        hang_on_seed: int | None = None,
        released: threading.Event | None = None,
    ) -> None:
        super().__init__(env)
        self.hang_on_seed = hang_on_seed
        self.released = released
        self.seed = None

    def reset(self, *, seed=None, options=None):
        self.seed = seed
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self.seed == self.hang_on_seed and self.released is not None:
            self.released.wait()
        time.sleep(random.random() * 0.02)
        return self.env.step(action)


@pytest.fixture(scope="module")
def engine(tiny_model):
    model, tokenizer, _ = load_policy(
        build_config(overrides={"model.name": tiny_model}).model, torch.device("cpu")
    )
    engine = LocalEngine(model, tokenizer, max_batch_size=len(SEEDS))
    yield engine
    engine.close()


def rollout(engine, dispatch: str, hang_on_seed=None, released=None, timeout=None, turns=3):
    executor = AgentExecutionEngine(
        agent_for_env(ENV_ID),
        lambda: Jittery(gym.make(ENV_ID), hang_on_seed, released),
        engine,
        tokenizer=engine.tokenizer,
        max_turns=turns,
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


def test_a_stuck_episode_times_out_without_holding_the_round(engine):
    """The others wait for the stuck episodes' round, but that wait is not their own time.

    Their own time (two rounds of the model, two env steps) stays far below the timeout even
    on a loaded machine; the stuck episodes are released only after the run.
    """
    rollout(engine, "lockstep", turns=1)  # the engine's first batch pays its warm-up here
    released = threading.Event()
    try:
        episodes = rollout(
            engine, "lockstep", hang_on_seed=5, released=released, timeout=10, turns=2
        )
    finally:
        released.set()
    reasons = [episode.termination_reason for episode in episodes]
    assert reasons[2:4] == [TerminationReason.TIMEOUT] * 2
    finished = [reason for i, reason in enumerate(reasons) if i not in (2, 3)]
    assert all(r in (TerminationReason.MAX_TURNS, TerminationReason.ENV_DONE) for r in finished)
