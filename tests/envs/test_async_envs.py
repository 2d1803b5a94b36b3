"""The async env API: ``areset`` / ``astep`` give exactly what ``reset`` / ``step`` give on
every registered id, through gym.make's wrappers with their rules kept; Web, MCP and SWE are
natively async (many envs stepped at once on one loop, no thread per call); a cancelled call
leaves no browser context, server or container behind; the execution engine plays native envs
through them."""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from rllm_envs.core.async_env import areset, astep, async_path

from tests.envs.conformance import ALL_IDS, make_env
from tests.envs.web_support import require_web
from tests.mcp.helpers import wait_until
from tests.parts import require_module


def tool_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class CountingExecutor(ThreadPoolExecutor):
    """A loop's default executor that counts what is handed to it (asyncio.to_thread's)."""

    def __init__(self) -> None:
        super().__init__(max_workers=4, thread_name_prefix="counted")
        self.submitted = 0

    def submit(self, *args: Any, **kwargs: Any):
        self.submitted += 1
        return super().submit(*args, **kwargs)


def counted_loop_executor() -> CountingExecutor:
    executor = CountingExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    return executor


# -- conformance: every id, the same results both ways ---------------------------------------
def web_solution(observation: str, turn: int, task: dict[str, Any]) -> str | None:
    from rllm_envs.web.solver import step_action
    from rllm_envs.web.tasks import FAMILIES

    solution = FAMILIES[task["family"]].instance(task["seed"]).solution
    return step_action(solution[turn], observation) if turn < len(solution) else None


# Actions that reach each env's I/O (tool calls, browser actions, commands, a sandboxed run);
# ids not listed play seeded samples of their action space.
SCRIPTED: dict[str, list[str]] = {
    "rllm/MCP-v0": [
        tool_call("open_document", doc_id="person-09"),
        tool_call("search", query="born"),
        "<tool_call>{not json</tool_call>",
        "<answer>Kreaxreas</answer>",
    ],
    "rllm/SWE-v0": [
        tool_call("bash", command="echo hello; git status --short | head -3; ls | head -3"),
        tool_call("view", path="."),
        "no tool call at all",
        tool_call("bash", command="exit 3"),
    ],
    "rllm/Code-v0": ["```python\nprint(sum(map(int, input().split())))\n```"],
    "rllm/GymText-v0": ["0", "1", "1", "0"],
}
# No spare container started in the background: these tests play one episode per env.
LEAN_KWARGS: dict[str, dict[str, Any]] = {"rllm/SWE-v0": {"pool_spares": 0}}
RESET_OPTIONS: dict[str, dict[str, Any]] = {
    "rllm/Web-v0": {"task": {"family": "login", "seed": 3}},
}


def play_sync(env: gym.Env, env_id: str) -> tuple[list[Any], list[str]]:
    options = RESET_OPTIONS.get(env_id)
    results: list[Any] = [env.reset(seed=7, options=options)]
    env.action_space.seed(7)
    actions = []
    for turn in range(4):
        if env_id == "rllm/Web-v0":
            action = web_solution(results[-1][0], turn, options["task"])
            if action is None:
                break
        else:
            scripted = SCRIPTED.get(env_id)
            action = scripted[turn] if scripted else env.action_space.sample()
            if scripted and turn >= len(scripted):
                break
        actions.append(action)
        results.append(env.step(action))
        if results[-1][2] or results[-1][3]:
            break
    return results, actions


async def play_async(env: gym.Env, env_id: str, actions: list[str]) -> list[Any]:
    results: list[Any] = [await areset(env, seed=7, options=RESET_OPTIONS.get(env_id))]
    for action in actions:
        results.append(await astep(env, action))
    return results


# Module fixtures that hold a shared part (the browser, the retrieval server) for later tests:
# the conformance env of that id shares it instead of starting its own.
HELD_PARTS = {"rllm/Web-v0": "web_envs", "rllm/MCP-v0": "mcp_envs"}


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_astep_gives_exactly_what_step_gives(env_id, request):
    if env_id in HELD_PARTS:
        request.getfixturevalue(HELD_PARTS[env_id])
    env = make_env(env_id, max_episode_steps=10, **LEAN_KWARGS.get(env_id, {}))
    try:
        expected, actions = play_sync(env, env_id)
        played = asyncio.run(play_async(env, env_id, actions))
    finally:
        env.close()
    assert len(played) == len(expected) > 1
    for turn, (got, want) in enumerate(zip(played, expected, strict=True)):
        np.testing.assert_equal(got, want, err_msg=f"{env_id}, turn {turn}")
    if env_id == "rllm/Web-v0":
        assert played[-1][1] == 1.0 and played[-1][2]  # the scripted solution won both ways


def test_every_rllm_env_has_the_async_api_and_the_io_bound_ones_are_native():
    from rllm_envs.core.registry import ENV_ENTRIES

    native = {"rllm/MCP-v0", "rllm/Web-v0", "rllm/SWE-v0"}
    for entry in ENV_ENTRIES:
        module, _, name = entry.entry_point.partition(":")
        env_class = getattr(__import__(module, fromlist=[name]), name)
        assert callable(env_class.areset) and callable(env_class.astep), entry.id
        declared = bool(env_class.metadata.get("rllm.native_async"))
        assert declared == (entry.id in native), entry.id


# -- Gymnasium's wrappers ----------------------------------------------------------------------
async def test_time_limit_truncates_the_same_through_astep():
    actions = ["Left", "Left", "Left", "Left"]  # never moves from the start: no natural end
    sync_env = gym.make("rllm/FrozenLake-v0", max_episode_steps=3)
    async_env = gym.make("rllm/FrozenLake-v0", max_episode_steps=3)
    sync_env.reset(seed=1)
    await areset(async_env, seed=1)
    for count, action in enumerate(actions, start=1):
        want = sync_env.step(action)
        got = await astep(async_env, action)
        np.testing.assert_equal(got, want)
        assert got[3] is (count >= 3)
        assert async_env._elapsed_steps == sync_env._elapsed_steps == count
    await areset(async_env, seed=1)  # a reset starts the count again
    assert async_env._elapsed_steps == 0
    assert (await astep(async_env, "Left"))[3] is False


async def test_step_before_reset_is_refused_by_order_enforcing():
    env = gym.make("rllm/FrozenLake-v0")
    with pytest.raises(gym.error.ResetNeeded, match="before calling env.reset"):
        await astep(env, "Left")


class SloppyEnv(gym.Env):
    """Returns an integer `terminated` and reuses its info dict: the passive checker's cases."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.info: dict[str, Any] = {"trace": [1]}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, self.info

    def step(self, action):
        return 1, 0.0, 0, False, self.info


def _warnings_of(play) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        play()
    return sorted(str(warning.message) for warning in caught)


def test_the_passive_checker_warns_through_astep_as_through_step():
    gym.register("rllm-test/Sloppy-v0", entry_point=SloppyEnv)
    try:

        def sync_play():
            env = gym.make("rllm-test/Sloppy-v0")
            env.reset(seed=0)
            env.step(0)
            env.step(0)

        def async_play():
            async def play():
                env = gym.make("rllm-test/Sloppy-v0")
                await areset(env, seed=0)
                await astep(env, 0)
                await astep(env, 0)

            asyncio.run(play())

        expected = _warnings_of(sync_play)
        assert any("`terminated` signal to be a boolean" in text for text in expected)
        assert sum("share an object" in text for text in expected) == 2  # reset-step, step-step
        assert _warnings_of(async_play) == expected
    finally:
        del gym.registry["rllm-test/Sloppy-v0"]


async def test_an_unknown_wrapper_and_a_plain_env_run_their_sync_calls_in_a_thread_or_inline():
    executor = counted_loop_executor()
    plain = gym.make("CartPole-v1")
    wrapped = gym.wrappers.RecordEpisodeStatistics(gym.make("rllm/FrozenLake-v0"))
    assert async_path(plain) == "thread"
    native = make_env("rllm/Web-v0")  # made without a browser: that starts at the first reset
    assert async_path(native) == "native"
    assert async_path(gym.wrappers.RecordEpisodeStatistics(native)) == "thread"
    native.close()
    reference = gym.make("CartPole-v1")
    np.testing.assert_equal(await areset(plain, seed=3), reference.reset(seed=3))
    for _ in range(3):
        np.testing.assert_equal(await astep(plain, 1), reference.step(1))
    assert executor.submitted == 4  # each call in a thread: CartPole declares nothing
    await areset(wrapped, options={"task": {"map": ["SF", "FG"]}})
    await astep(wrapped, "Right")
    *_, info = await astep(wrapped, "Down")
    assert info["episode"]["l"] == 2 and info["episode"]["r"] == 1.0  # the wrapper's own work
    assert executor.submitted == 4  # FrozenLake is inline-safe, through any wrapper: no thread


# -- native async: many envs on one loop, no thread per call ----------------------------------
MCP_ACTION = tool_call("open_document", doc_id="person-09")


@pytest.fixture(scope="module")
def mcp_envs():
    require_module("mcp", "rllm/MCP-v0 needs the mcp extra")
    envs = [make_env("rllm/MCP-v0", max_turns=100) for _ in range(16)]
    yield envs
    for env in envs:
        env.close()


async def test_many_mcp_envs_step_at_once_on_one_loop_without_threads(mcp_envs):
    assert async_path(mcp_envs[0]) == "native"
    executor = counted_loop_executor()
    threads_before = threading.active_count()
    peak = [threads_before]

    async def watch():
        while True:
            peak[0] = max(peak[0], threading.active_count())
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    await asyncio.gather(*(areset(env, seed=index) for index, env in enumerate(mcp_envs)))
    for _ in range(3):
        results = await asyncio.gather(*(astep(env, MCP_ACTION) for env in mcp_envs))
        assert all("Sekrous Pirkdrifur" in observation for observation, *_ in results)
    watcher.cancel()
    assert executor.submitted == 0
    assert peak[0] == threads_before


# -- Web: one browser, many pages, awaited on the caller's loop -------------------------------
def env_call_threads() -> set[str]:
    """Live threads, but for the task server's request handlers (one per browser request)."""
    return {t.name for t in threading.enumerate() if "process_request" not in t.name}


@pytest.fixture(scope="module")
def web_envs():
    require_web()
    envs = [make_env("rllm/Web-v0") for _ in range(2)]
    for env in envs:
        env.unwrapped._acquire()  # the browser host they share (it starts the browser lazily)
    yield envs
    for env in envs:
        env.close()


def test_web_envs_step_at_once_without_threads_and_a_cancelled_reset_leaks_no_context(web_envs):
    from rllm_envs.web import processes

    # A site that takes connections and never answers: a reset opening it hangs in the page load.
    silent = socket.create_server(("127.0.0.1", 0))
    slow_page = {"url": f"http://127.0.0.1:{silent.getsockname()[1]}/", "goal": "Wait."}
    envs = web_envs
    host = envs[0].unwrapped.resources.host

    def contexts() -> int:
        """The browser's contexts once no spare is being made and no context is closing."""

        async def count() -> int:
            while host.refills or host.closing:
                await asyncio.sleep(0.02)
            return len(host.browser.contexts)

        return host.run(count(), 10)

    async def play() -> None:
        rows = [{"family": "login", "seed": seed} for seed in range(len(envs))]
        pairs = list(zip(envs, rows, strict=True))
        await asyncio.gather(*(areset(env, options={"task": row}) for env, row in pairs))
        executor = counted_loop_executor()
        threads_before = env_call_threads()
        # Every env's second episode and its steps: awaited on the browser host, no thread.
        firsts = await asyncio.gather(*(areset(env, options={"task": row}) for env, row in pairs))
        actions = [web_solution(first[0], 0, row) for first, row in zip(firsts, rows, strict=True)]
        results = await asyncio.gather(*(astep(e, a) for e, a in zip(envs, actions, strict=True)))
        assert all(info.get("action_valid") for *_, info in results)
        assert executor.submitted == 0 and env_call_threads() == threads_before
        # A reset cancelled while its page loads: the context it took is closed, not leaked.
        settled = await asyncio.to_thread(contexts)
        reset = asyncio.create_task(areset(envs[0], options={"task": slow_page}))
        await asyncio.sleep(0.5)
        reset.cancel()
        await asyncio.gather(reset, return_exceptions=True)
        # Once the cancellation has reached the browser host: its old tab and the context it
        # took are closed, a spare of the new kind made. A leaked context would stay over.
        assert await asyncio.to_thread(wait_until, lambda: contexts() == settled, 5)

    try:
        asyncio.run(play())
    finally:
        for env in envs:
            env.close()  # the last users of the browser: it closes with them
        silent.close()
    assert wait_until(lambda: not processes.browser_processes(host.marker), timeout=10)


# -- SWE: commands' replies read off the container streams on the loop ------------------------
def test_swe_commands_overlap_on_one_loop_and_a_cancelled_one_gives_up_its_container():
    from tests.envs.swe_support import FAST_POLICY, require_images, shipped_rows

    rows = [row for row in shipped_rows("train") if row["repo"] == "toolz"][:1]
    client = require_images({row["image_name"] for row in rows})
    envs = [
        make_env("rllm/SWE-v0", tasks=rows, policy=FAST_POLICY, pool_spares=0) for _ in range(2)
    ]
    assert async_path(envs[0]) == "native"

    async def play() -> tuple[Any, str]:
        await asyncio.gather(*(areset(env, seed=0) for env in envs))
        executor = counted_loop_executor()
        started = time.monotonic()
        results = await asyncio.gather(
            *(astep(env, tool_call("bash", command="sleep 1; echo slept")) for env in envs)
        )
        assert time.monotonic() - started < 1.8  # two one-second commands, at once
        assert all("slept" in observation for observation, *_ in results)
        assert executor.submitted == 0  # no thread waited on any of them
        first = envs[0].unwrapped
        container = first.workspace.id
        step = asyncio.create_task(astep(envs[0], tool_call("bash", command="sleep 30")))
        await asyncio.sleep(0.5)
        step.cancel()
        await asyncio.gather(step, return_exceptions=True)
        # The container's reply may still come, so it serves no other command: the next
        # step says so, as an infrastructure failure, and the container is removed.
        return await astep(envs[0], tool_call("bash", command="echo again")), container

    try:
        (_, _, _, truncated, info), container = asyncio.run(play())
    finally:
        for env in envs:
            env.close()
    assert info["failure"] == "sandbox" and truncated
    with pytest.raises(Exception, match="No such container|404"):
        client.containers.get(container)


# -- the execution engine ------------------------------------------------------------------------
def engine_rollout(env_factory, completion: str, episodes: int = 4, **options: Any):
    """Tool-agent episodes against a canned model; returns them and the names of every thread
    seen while they ran."""
    from rllm_agents.agents.tool_agent import ToolAgent
    from rllm_agents.engines.openai import OpenAIEngine
    from rllm_agents.execution import AgentExecutionEngine
    from rllm_agents.testing.fault_server import FaultServer

    seen: set[str] = set()

    async def run():
        async def watch():
            while True:
                seen.update(thread.name for thread in threading.enumerate())
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        with FaultServer(completion=completion) as server:
            client = OpenAIEngine(server.base_url, "canned", max_retries=0)
            engine = AgentExecutionEngine(ToolAgent, env_factory, client, progress=False, **options)
            try:
                return await engine.execute_tasks([{"question": "Who?", "answer": "X"}] * episodes)
            finally:
                watcher.cancel()
                await client.aclose()

    return asyncio.run(run()), seen


def test_the_engine_plays_native_envs_through_astep_and_the_thread_policy_forces_threads(
    mcp_envs,
):
    factory = functools.partial(make_env, "rllm/MCP-v0", max_turns=3)
    runs = {
        policy: engine_rollout(factory, MCP_ACTION, n_parallel=4, max_turns=3, env_calls=policy)
        for policy in ("auto", "thread")
    }
    for policy, (episodes, threads) in runs.items():
        assert all(e.termination_reason.value == "env_truncated" for e in episodes), policy
        workers = {name for name in threads if name.startswith("rllm-env-")}
        # A thread per slot, or one: making the factory's first env may block, so it is made on
        # a worker; it and its siblings are then played on the loop.
        assert len(workers) == (4 if policy == "thread" else 1), policy
    auto, thread = (runs[policy][0] for policy in ("auto", "thread"))
    for a, b in zip(auto, thread, strict=True):
        assert a.env.transitions == b.env.transitions and a.reward == b.reward


def test_cancelled_mcp_calls_are_cancelled_on_the_server_loop_and_leave_nothing_behind():
    require_module("mcp", "rllm/MCP-v0 needs the mcp extra")
    from rllm_envs.mcp import MCPEnv

    from tests.mcp.helpers import TOY_SERVER, child_pids

    before = child_pids()
    tasks = [{"question": "?", "answer": "5"}]
    # Holds the server: the envs below share its session (and so their calls its loop).
    held = MCPEnv({"toy": TOY_SERVER}, tasks, call_timeout=60)
    manager = held._manager
    (spec,) = held._connections

    def loop_tasks() -> int:
        async def count() -> int:
            return len(asyncio.all_tasks())

        return manager.run(count(), 5)

    idle_tasks = loop_tasks()

    async def cancel_midway() -> float:
        await held.areset(seed=0)
        started = time.monotonic()
        slow = asyncio.create_task(held.astep(tool_call("sleep", seconds=60)))
        await asyncio.sleep(0.3)
        slow.cancel()
        await asyncio.gather(slow, return_exceptions=True)
        return time.monotonic() - started

    try:
        assert asyncio.run(cancel_midway()) < 2
        assert wait_until(lambda: loop_tasks() == idle_tasks, timeout=5)  # the call is gone
        episodes, _ = engine_rollout(
            lambda: MCPEnv({"toy": TOY_SERVER}, tasks, call_timeout=60),
            tool_call("sleep", seconds=60),
            episodes=2,
            n_parallel=2,
            max_turns=2,
            trajectory_timeout=1.0,
        )
        assert [e.termination_reason.value for e in episodes] == ["timeout"] * 2
        assert manager._shared[spec].users == 1  # every env the engine made was closed
        assert wait_until(lambda: loop_tasks() == idle_tasks, timeout=5)
        held.reset(seed=0)  # the session was not harmed by the cancelled calls
        assert held.step(tool_call("add", a=2, b=3))[0].split("\n")[1] == "5"
    finally:
        held.close()
    assert wait_until(lambda: not (child_pids() - before), timeout=5)  # the server is gone


# -- the loop bridge ---------------------------------------------------------------------------
def test_the_loop_bridge_returns_raises_times_out_and_cancels_on_the_other_loop():
    from rllm_envs.core.loop_bridge import LoopBridge

    target = asyncio.new_event_loop()
    thread = threading.Thread(target=target.run_forever, daemon=True)
    thread.start()
    bridge = LoopBridge(target)
    stopped: list[str] = []

    async def work(value: int, seconds: float = 0.0) -> int:
        assert asyncio.get_running_loop() is target
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            stopped.append(f"cancelled {value}")
            raise
        if value < 0:
            raise ValueError(value)
        return value * 2

    async def caller() -> None:
        assert await asyncio.gather(*(bridge.run(work(n)) for n in range(200))) == [
            2 * n for n in range(200)
        ]
        with pytest.raises(ValueError):
            await bridge.run(work(-1))
        with pytest.raises(TimeoutError):
            await bridge.run(work(1, seconds=10), timeout=0.1)
        pending = asyncio.create_task(bridge.run(work(2, seconds=10)))
        await asyncio.sleep(0.1)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending

    try:
        asyncio.run(caller())
        assert wait_until(lambda: stopped == ["cancelled 1", "cancelled 2"], timeout=2)
    finally:
        target.call_soon_threadsafe(target.stop)
        thread.join(5)
        target.close()


def test_the_benchmark_plays_both_sides_and_leaves_no_server():
    require_module("mcp", "rllm/MCP-v0 needs the mcp extra")
    from tests.benchmark_runs import run_benchmark

    result = run_benchmark(
        "async_envs.py", "--envs=3", "--steps=2", "--rounds=1", "--engine-turns=0", "--json"
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])["steps"]
    assert figures["thread"]["modes"] == ["thread"] and figures["native"]["modes"] == ["async"]
    for side in ("thread", "native"):
        assert figures[side]["steps"] == 6 and figures[side]["failures"] == 0
        assert figures[side]["leftover_servers"] == 0
    assert "thread/native:" in result.stdout
