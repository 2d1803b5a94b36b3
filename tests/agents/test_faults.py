"""No task is lost when the model server fails: the loopback fault server + the HTTP engine."""

from __future__ import annotations

import asyncio
import time

import gymnasium as gym
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.agents import FrozenLakeAgent, TextAgent
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.testing.fault_server import FaultServer
from rllm_agents.types import TerminationReason
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.tasks import TaskSet
from rllm_envs.core.text_env import TextEnv, Transition

LAKE = {"map": ["SFF", "FFF", "FFG"]}


def run(server: FaultServer, tasks: int, *, max_retries: int, n_parallel=8, **engine_kwargs):
    """Roll out `tasks` FrozenLake tasks against `server` (client and loop made here)."""

    async def rollout():
        client = OpenAIEngine(
            server.base_url, "canned", max_retries=max_retries, backoff_base_s=0.01, timeout=10
        )
        engine = AgentExecutionEngine(
            FrozenLakeAgent,
            lambda: gym.make("rllm/FrozenLake-v0"),
            client,
            n_parallel=n_parallel,
            max_turns=4,
            progress=False,
            **engine_kwargs,
        )
        try:
            return await engine.execute_tasks(
                [dict(LAKE, task_id=f"lake-{i}") for i in range(tasks)]
            )
        finally:
            await client.aclose()

    return asyncio.run(rollout())


def test_transient_faults_are_retried_away():
    script = ["500", "drop", "429", "ok", "garbage", "ok"]
    with FaultServer(script=script, cycle=True, completion="`Down`") as server:
        # One at a time, so each request's retries walk the script: at most three faults in a
        # row, fewer than the retries allowed.
        episodes = run(server, 12, max_retries=6, n_parallel=1)
    assert len(episodes) == 12
    assert [e.id.split(":")[0] for e in episodes] == [f"lake-{i}" for i in range(12)]
    # Down, Down reaches the bottom row; then Down again is a no-op: the turn limit ends it.
    assert {e.termination_reason for e in episodes} == {TerminationReason.MAX_TURNS}
    assert all(len(e.trajectories[0].steps) == 4 for e in episodes)


def test_persistent_errors_end_as_error_episodes():
    with FaultServer(script=["500"], cycle=True) as server:
        episodes = run(server, 10, max_retries=1)
    assert len(episodes) == 10
    assert {e.termination_reason for e in episodes} == {TerminationReason.ERROR}
    assert all("500" in e.error for e in episodes)


def test_mixed_faults_without_retries_lose_nothing():
    script = ["ok", "drop", "ok", "garbage", "ok", "ok", "500"]
    with FaultServer(script=script, cycle=True, completion="`Right`") as server:
        episodes = run(server, 16, max_retries=0)
    assert len(episodes) == 16
    reasons = {e.termination_reason for e in episodes}
    assert reasons <= {TerminationReason.ERROR, TerminationReason.MAX_TURNS}
    assert TerminationReason.ERROR in reasons
    for episode in episodes:
        if episode.termination_reason == TerminationReason.ERROR:
            assert episode.error
        else:
            assert len(episode.trajectories[0].steps) == 4


def test_stalled_server_ends_episodes_by_timeout():
    with FaultServer(script=["stall"], cycle=True, stall_s=20) as server:
        started = time.perf_counter()
        episodes = run(server, 8, max_retries=0, trajectory_timeout=0.5)
        elapsed = time.perf_counter() - started
    assert {e.termination_reason for e in episodes} == {TerminationReason.TIMEOUT}
    assert elapsed < 10  # all eight waited concurrently, none waited for the stall to end


class BrokenSandboxEnv(TextEnv):
    """A text env whose (pretend) sandbox dies on the second action."""

    def begin(self, task):
        self.actions = 0
        return "Say anything.", {}

    def act(self, action):
        self.actions += 1
        if self.actions == 2:
            raise InfrastructureFailure("sandbox", "the sandbox stopped answering")
        return Transition("Again.", 0.5, False, False, {})


def test_env_infrastructure_failure_ends_as_env_failure():
    tasks = TaskSet("broken", tuple({"task_id": f"t{i}"} for i in range(3)))

    async def rollout():
        with FaultServer(completion="hello") as server:
            client = OpenAIEngine(server.base_url, "canned", max_retries=0)
            engine = AgentExecutionEngine(
                TextAgent, lambda: BrokenSandboxEnv(tasks), client, max_turns=5, progress=False
            )
            try:
                return await engine.execute_seeds([0, 1, 2])
            finally:
                await client.aclose()

    episodes = asyncio.run(rollout())
    assert {e.termination_reason for e in episodes} == {TerminationReason.ENV_FAILURE}
    assert {e.failure for e in episodes} == {"sandbox"}
    assert all(len(e.trajectories[0].steps) == 2 for e in episodes)
