"""Serving slots: an engine sends a server no more requests at once than it serves, and a
request's wait for a free slot counts neither against its HTTP timeout nor against its
episode's ``trajectory_timeout``; the wait is reported as ``queue_time``.

The llama.cpp tests use the real server (the embedded SmolLM2) behind a forwarding proxy that
counts the requests in flight at the server's door; the episode test uses the loopback stand-in
server, whose latency is fixed, so its timing is exact.
"""

from __future__ import annotations

import asyncio
import math
import time

import aiohttp
import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers rllm/FrozenLake-v0
from aiohttp import web
from rllm_agents.agents import FrozenLakeAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.engines.slots import QUEUE_CLOCK, QueueClock, ServingSlots, serving_slots
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.execution.dispatch import wait_for_own_time
from rllm_agents.testing.fault_server import FaultServer
from rllm_agents.types import TerminationReason

HELLO = [{"role": "user", "content": "Say hello."}]
FEW_TOKENS = SamplingParams(temperature=0.0, max_tokens=4)


class CountingProxy:
    """Forwards every request to `upstream` and counts how many are in flight at once."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.in_flight = 0
        self.max_in_flight = 0
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None
        self.base_url = ""

    async def __aenter__(self) -> CountingProxy:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._client = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._client.close()
        await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            url = self.upstream + request.path.removeprefix("/v1")
            async with self._client.request(
                request.method,
                url,
                data=await request.read(),
                headers={"Content-Type": "application/json"},
            ) as answer:
                return web.Response(status=answer.status, body=await answer.read())
        finally:
            self.in_flight -= 1


async def test_requests_at_the_server_never_exceed_its_slots(llamacpp_server):
    async with CountingProxy(llamacpp_server.base_url) as proxy:
        # Without a limit, concurrent requests pile up at the one-at-a-time server...
        unlimited = OpenAIEngine(proxy.base_url, "smollm2")
        await asyncio.gather(*(unlimited.generate(HELLO, sampling=FEW_TOKENS) for _ in range(3)))
        await unlimited.aclose()
        assert proxy.max_in_flight == 3
        # ... with one slot, one at a time reaches it; the rest wait in the engine.
        proxy.max_in_flight = 0
        engine = OpenAIEngine(proxy.base_url, "smollm2", max_concurrency=1)
        outputs = await asyncio.gather(
            *(engine.generate(HELLO, sampling=FEW_TOKENS) for _ in range(4))
        )
        await engine.aclose()
    assert proxy.max_in_flight == 1
    assert serving_slots(engine) == 1 and serving_slots(unlimited) is None
    assert all(output.text for output in outputs)
    assert all(output.usage["completion_tokens"] > 0 for output in outputs)
    assert sorted(o.queue_time for o in outputs)[-1] > 0  # the last waited for three others


async def test_time_queued_does_not_count_against_the_timeout(llamacpp_server):
    """Requests that each fit the timeout alone all succeed, though the last of them waits
    longer than the timeout for its slot (no retries allowed: a timeout would fail it)."""
    engine = OpenAIEngine(llamacpp_server.base_url, "smollm2", max_concurrency=1, max_retries=0)
    durations = []
    for _ in range(3):
        started = time.perf_counter()
        await engine.generate(HELLO, sampling=FEW_TOKENS)
        durations.append(time.perf_counter() - started)
    timeout = max(5 * max(durations), 1.0)  # a request alone fits it with room to spare
    # All of them queued take twice as long, counted at the fastest a request went (a slow
    # first one, on a busy machine, would make the queue too short to pass the timeout).
    count = math.ceil(2 * timeout / min(durations)) + 1
    await engine.aclose()
    engine = OpenAIEngine(
        llamacpp_server.base_url, "smollm2", max_concurrency=1, max_retries=0, timeout=timeout
    )
    outputs = await asyncio.gather(
        *(engine.generate(HELLO, sampling=FEW_TOKENS) for _ in range(count))
    )
    await engine.aclose()
    assert len(outputs) == count and all(output.text for output in outputs)
    assert max(output.queue_time for output in outputs) > timeout


async def test_an_episode_timeout_leaves_out_time_queued():
    """Six one-turn episodes at once on one slot of a server that takes 0.2 s a request: the
    last waits 1 s for its turn, past a 0.5 s trajectory_timeout, and still ends normally."""
    with FaultServer(latency_s=0.2, completion="`Left`") as server:
        engine = OpenAIEngine(server.base_url, "canned", max_concurrency=1)
        runner = AgentExecutionEngine(
            FrozenLakeAgent,
            lambda: gym.make("rllm/FrozenLake-v0"),
            engine,
            n_parallel=6,
            max_turns=1,
            trajectory_timeout=0.5,
            progress=False,
        )
        try:
            episodes = await runner.execute_seeds(range(6))
        finally:
            await engine.aclose()
        assert server.stats.max_in_flight == 1
    assert all(e.termination_reason != TerminationReason.TIMEOUT for e in episodes)
    assert max(e.metrics["queue_time"] for e in episodes) > 0.5
    assert runner.last_metrics["queue_time"] > 0.5
    assert all(step.queue_time >= 0 for e in episodes for step in e.trajectories[0].steps)


async def test_a_wait_still_going_on_is_left_off_the_clock():
    """The clock counts a wait while it lasts, so a timeout that falls during it moves on."""
    slots, clock = ServingSlots(1), QueueClock()

    async def hog() -> None:
        async with slots.hold():
            await asyncio.sleep(0.6)

    async def episode() -> str:
        QUEUE_CLOCK.set(clock)
        async with slots.hold() as lease:
            await asyncio.sleep(0.05)
        return f"slot {lease.index} after {lease.queued_s:.1f}s"

    hogging = asyncio.create_task(hog())
    await asyncio.sleep(0)  # the hog takes the slot first
    assert await wait_for_own_time(episode(), 0.3, clock.waited) == "slot 0 after 0.6s"
    await hogging
    assert clock.waited() == pytest.approx(0.6, abs=0.1)
    assert slots.peak_in_flight == 1
