"""Rollouts through rllm-agents' execution engine and local engine (``rollout.engine=execution``).

The same episodes as :mod:`rllm_train.native.rollout`, produced by the general machinery every
rllm evaluation uses: ``AgentExecutionEngine`` (async episodes, token-in/token-out rendering by
``rllm_agents.chat``) over a ``LocalEngine`` that serves the very model object being trained,
so each step samples from the latest weights. A fresh engine per step, seeded from the run
seed and the step, keeps the sampling reproducible (the lockstep rollout, the default, is also
bit-for-bit resumable; here the order in which requests join a batch may vary).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import gymnasium as gym
from rllm_agents.agents.base import BaseAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.local import LocalEngine
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.types import Episode

from rllm_train.native.rollout import RolloutSettings, RolloutTimings


def run_engine_rollouts(
    model,
    tokenizer,
    env_factory: Callable[[], gym.Env],
    agent_factory: Callable[[], BaseAgent],
    seeds: list[int],
    settings: RolloutSettings,
    timings: RolloutTimings,
    engine_seed: int,
) -> list[Episode]:
    """One Episode per seed, in order, from the execution engine."""
    engine = LocalEngine(
        model,
        tokenizer,
        device=str(next(model.parameters()).device),
        max_batch_size=len(seeds),
        seed=engine_seed,
    )
    executor = AgentExecutionEngine(
        agent_factory,
        env_factory,
        engine,
        tokenizer=tokenizer,
        n_parallel=len(seeds),
        max_turns=settings.max_turns,
        max_prompt_tokens=settings.max_prompt_tokens,
        sampling=SamplingParams(
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_tokens=settings.max_response_tokens,
        ),
        token_level=True,
        seed=None,
        progress=False,
    )
    started = time.perf_counter()
    try:
        episodes = executor.run(seeds=seeds)
    finally:
        engine.close()
    elapsed = time.perf_counter() - started
    env_seconds = sum(episode.metrics.get("env_time", 0.0) for episode in episodes)
    timings.env_seconds += env_seconds
    timings.generate_seconds += max(elapsed - env_seconds, 0.0)
    return episodes
