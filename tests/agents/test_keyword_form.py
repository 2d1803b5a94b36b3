"""AgentExecutionEngine's documented keyword form: one implementation with the factory form."""

from __future__ import annotations

import asyncio

import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents import AgentExecutionEngine, TextAgent, compute_pass_at_k
from rllm_agents.engines import ENGINES
from rllm_agents.execution.keyword_form import sampling_of
from rllm_agents.types import Episode, Trajectory
from rllm_envs import DatasetRegistry
from rllm_envs.arithmetic import ArithmeticEnv


def test_keyword_form_with_a_registered_id_and_the_embedded_engine():
    engine = AgentExecutionEngine(
        agent_class=TextAgent,
        agent_args={"system_prompt": "You are a calculator."},
        env_class="rllm/Arithmetic-v0",
        engine_name="embedded",
        sampling_params={"temperature": 1.0, "model": "tiny"},
        max_response_length=4,
        max_prompt_length=256,
        n_parallel_agents=8,
    )
    try:
        tasks = DatasetRegistry.load_dataset("arithmetic", "test").take(2).repeat(n=3)
        results = asyncio.run(engine.execute_tasks(tasks))
    finally:
        engine.close()
    assert [episode.task for episode in results] == list(tasks)
    assert engine.scheduling.n_parallel == 8 and engine.limits.max_response_tokens == 4
    assert engine.limits.max_prompt_tokens == 256 and engine.sampling.max_tokens == 4
    scores = compute_pass_at_k(results)
    assert scores["tasks"] == 2 and scores["samples_per_task"] == 3
    assert set(scores) == {"tasks", "samples_per_task", "pass@1", "pass@2", "pass@3"}


def test_env_class_may_be_a_class_and_engines_are_a_registry():
    assert {"openai", "local", "embedded", "vllm", "llamacpp"} <= set(ENGINES)
    with pytest.raises(ValueError, match="unknown engine"):
        AgentExecutionEngine(agent_class=TextAgent, env_class=ArithmeticEnv, engine_name="nope")
    with pytest.raises(TypeError, match="not both"):
        AgentExecutionEngine(lambda: TextAgent(), agent_class=TextAgent, env_class=ArithmeticEnv)
    with pytest.raises(ValueError, match="unknown key"):
        sampling_of({"temperature": 0.5, "model": "m", "frequency": 1}, None)
    sampling, model = sampling_of({"top_p": 0.9, "model": "m", "stop": "\n"}, 64)
    assert (sampling.top_p, sampling.max_tokens, sampling.stop, model) == (0.9, 64, ("\n",), "m")


def _episode(task: str, reward: float) -> Episode:
    return Episode(trajectories=[Trajectory(reward=reward)], info={"task_key": task})


def test_compute_pass_at_k_groups_by_task():
    results = [_episode("a", r) for r in (1, 0, 0, 0)] + [_episode("b", 0) for _ in range(4)]
    scores = compute_pass_at_k(results)
    assert scores["pass@1"] == pytest.approx(0.125)
    assert scores["pass@4"] == pytest.approx(0.5)
    assert compute_pass_at_k(results, k=2) == {
        "tasks": 2.0,
        "samples_per_task": 4.0,
        "pass@2": pytest.approx(0.25),
    }
