"""Where env calls run: worker threads by default, the event loop for inline-safe envs."""

from __future__ import annotations

import asyncio
import threading
import time

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.agents import FrozenLakeAgent
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.execution.env_slot import INLINE_SAFE_KEY, EnvSlot, declares_inline_safe
from rllm_agents.testing.fault_server import FaultServer
from rllm_agents.types import TerminationReason


class ThreadRecorder(gym.Wrapper):
    """FrozenLake that records which thread made it and ran each of its calls."""

    def __init__(self, log: list[list[tuple[str, int]]], inline_safe: bool) -> None:
        super().__init__(gym.make("rllm/FrozenLake-v0"))
        self.metadata = {**self.env.metadata, INLINE_SAFE_KEY: inline_safe}
        self.calls = [("make", threading.get_ident())]
        log.append(self.calls)

    def reset(self, **kwargs):
        self.calls.append(("reset", threading.get_ident()))
        return super().reset(**kwargs)

    def step(self, action):
        self.calls.append(("step", threading.get_ident()))
        return super().step(action)

    def close(self):
        self.calls.append(("close", threading.get_ident()))
        return super().close()


def rollout(inline_safe, env_calls: str = "auto", episodes: int = 6):
    """Run FrozenLake episodes on 3 slots; returns (per-env call logs, loop thread).

    ``inline_safe`` is what every env declares, or a list: what the 1st, 2nd... env declares.
    """
    log: list[list[tuple[str, int]]] = []
    declarations = list(inline_safe) if isinstance(inline_safe, list) else None

    def factory():
        return ThreadRecorder(log, declarations.pop(0) if declarations else inline_safe)

    async def run():
        with FaultServer(completion="`Down`") as server:
            client = OpenAIEngine(server.base_url, "canned", max_retries=0)
            engine = AgentExecutionEngine(
                FrozenLakeAgent,
                factory,
                client,
                n_parallel=3,
                max_turns=3,
                progress=False,
                env_calls=env_calls,
            )
            try:
                result = await engine.execute_tasks(
                    [{"map": ["SFFF", "FFFF", "FFFF", "FFFG"]}] * episodes
                )
            finally:
                await client.aclose()
        return result, threading.get_ident()

    episodes_out, loop_thread = asyncio.run(run())
    assert [e.termination_reason for e in episodes_out] == [TerminationReason.MAX_TURNS] * episodes
    used = [calls for calls in log if {method for method, _ in calls} != {"make", "close"}]
    assert len(used) == 3  # one env per slot, reused across its tasks (others closed unused)
    return used, loop_thread


def threads_of(calls, *methods):
    return {thread for method, thread in calls if method in methods}


def test_frozenlake_declares_itself_inline_safe():
    assert declares_inline_safe(gym.make("rllm/FrozenLake-v0"))  # through gym.make's wrappers
    assert not declares_inline_safe(gym.make("CartPole-v1"))


def test_inline_safe_env_is_made_on_a_worker_then_stepped_on_the_loop():
    log, loop_thread = rollout(inline_safe=True)
    made_on_workers = [calls for calls in log if threads_of(calls, "make") != {loop_thread}]
    # Making may block, so the first env is made on a worker; once it has declared itself
    # inline-safe, its siblings from the same factory are made on the loop, thread-free.
    assert len(made_on_workers) == 1
    for calls in log:
        assert threads_of(calls, "step") == {loop_thread}
        assert threads_of(calls, "close") == {loop_thread}


def test_a_second_run_of_the_same_engine_makes_no_env_on_a_worker():
    log: list[list[tuple[str, int]]] = []

    async def run():
        with FaultServer(completion="`Down`") as server:
            client = OpenAIEngine(server.base_url, "canned", max_retries=0)
            engine = AgentExecutionEngine(
                FrozenLakeAgent,
                lambda: ThreadRecorder(log, True),
                client,
                n_parallel=3,
                max_turns=2,
                progress=False,
            )
            tasks = [{"map": ["SFF", "FFF", "FFG"]}] * 3
            try:
                await engine.execute_tasks(tasks)
                first_run = len(log)
                await engine.execute_tasks(tasks)
            finally:
                await client.aclose()
        return first_run, threading.get_ident()

    first_run, loop_thread = asyncio.run(run())
    second_run_makes = [threads_of(calls, "make") for calls in log[first_run:]]
    assert second_run_makes == [{loop_thread}] * 3  # the first run's verdict is remembered


def test_a_sibling_that_does_not_declare_inline_safety_gets_its_own_worker():
    # The first env declares inline safety, every later one does not: the later ones made on
    # the loop are closed unused and made again on a worker, which they keep for life.
    log, loop_thread = rollout(inline_safe=[True] + [False] * 10)
    on_workers = [calls for calls in log if loop_thread not in threads_of(calls, "step")]
    assert len(on_workers) == 2
    workers = [threads_of(calls, "make", "reset", "step", "close") for calls in on_workers]
    assert all(len(threads) == 1 and loop_thread not in threads for threads in workers)


def test_other_envs_keep_one_worker_thread_for_life():
    log, loop_thread = rollout(inline_safe=False)
    workers = []
    for calls in log:
        (worker,) = threads_of(calls, "make", "reset", "step", "close")
        assert worker != loop_thread
        workers.append(worker)
    assert len(set(workers)) == 3  # each env has its own thread


def test_thread_policy_overrides_the_declaration():
    log, loop_thread = rollout(inline_safe=True, env_calls="thread")
    for calls in log:
        assert loop_thread not in threads_of(calls, "make", "reset", "step", "close")


def test_inline_policy_runs_everything_on_the_loop():
    log, loop_thread = rollout(inline_safe=False, env_calls="inline")
    for calls in log:
        assert threads_of(calls, "make", "reset", "step", "close") == {loop_thread}


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="env_calls"):
        AgentExecutionEngine(FrozenLakeAgent, lambda: None, None, env_calls="fork")


class SlowToMake(gym.Wrapper):
    """FrozenLake that takes a while to make and records being closed."""

    def __init__(self, closed: list[bool], native: bool) -> None:
        time.sleep(0.3)
        super().__init__(gym.make("rllm/FrozenLake-v0"))
        if native:  # stands for a natively async env: its slot plays it through astep
            self.metadata = {**self.env.metadata, "rllm.native_async": True}
        self.closed = closed

    def close(self):
        self.closed.append(True)
        return super().close()


@pytest.mark.parametrize("policy", ["thread", "async"])
def test_an_env_made_for_a_cancelled_call_is_closed_once_made(policy):
    closed: list[bool] = []

    async def run():
        slot = EnvSlot(lambda: SlowToMake(closed, native=True), "rllm-env-test", policy)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slot.call("reset", seed=0), 0.05)
        slot.discard()  # what the engine does after a timed-out call
        assert slot.env is None
        await slot.aclose()  # waits for the env being made, and closes it

    asyncio.run(run())
    assert closed == [True]
