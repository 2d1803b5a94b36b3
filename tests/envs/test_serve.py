"""``rllm-envs serve``: envs over the OpenEnv protocol, played as a client plays them.

The server runs on a real socket (aiohttp's TestServer, or the installed command as a child
process); the client speaks the protocol's JSON over WebSocket and HTTP. Every episode is
checked against the same env played in-process with the same seed and actions.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm ids
from aiohttp.test_utils import TestServer
from rllm_envs.serve.app import ServeSettings, build_app
from rllm_envs.serve.cli import ServedEnv
from rllm_envs.serve.sessions import Sessions

REPO_ROOT = Path(__file__).resolve().parents[2]
LAKE = "rllm/FrozenLake-v0"
MOVES = ["Down", "Right", "Down", "Right", "Down", "Right", "Up", "Left"]


def play(env: gym.Env, seed: int, actions: list[str]) -> list[tuple]:
    """(observation, reward, terminated, truncated) of reset then each action, until done."""
    observation, _ = env.reset(seed=seed)
    played = [(observation, None, False, False)]
    for action in actions:
        observation, reward, terminated, truncated, _ = env.step(action)
        played.append((observation, reward, terminated, truncated))
        if terminated or truncated:
            break
    return played


def play_in_process(played_id: str, seed: int, actions: list[str], **kwargs) -> list[tuple]:
    """:func:`play` on a fresh `played_id` env, closed after."""
    env = gym.make(played_id, **kwargs)
    try:
        return play(env, seed, actions)
    finally:
        env.close()


async def play_over_socket(ws, seed: int, actions: list[str]) -> list[tuple]:
    await ws.send_json({"type": "reset", "data": {"seed": seed}})
    reply = await ws.receive_json()
    assert reply["type"] == "observation", reply
    observation = reply["data"]["observation"]
    played = [(observation["text"], reply["data"]["reward"], False, False)]
    for action in actions:
        await ws.send_json({"type": "step", "data": {"text": action}})
        reply = await ws.receive_json()
        assert reply["type"] == "observation", reply
        body = reply["data"]
        observation = body["observation"]
        played.append(
            (
                observation["text"],
                body["reward"],
                observation["terminated"],
                observation["truncated"],
            )
        )
        assert body["done"] == (observation["terminated"] or observation["truncated"])
        if body["done"]:
            break
    return played


def served(env_id: str = LAKE, max_sessions: int = 128, **settings) -> tuple[TestServer, Sessions]:
    sessions = Sessions(ServedEnv(env_id, {}), max_sessions)
    return TestServer(build_app(sessions, ServeSettings(env_id=env_id, **settings))), sessions


async def test_an_episode_over_the_socket_is_the_in_process_episode():
    server, sessions = served()
    async with server, aiohttp.ClientSession() as client:
        async with client.ws_connect(server.make_url("/ws")) as ws:
            for seed in (0, 7):
                assert await play_over_socket(ws, seed, MOVES) == play_in_process(LAKE, seed, MOVES)
            await ws.send_json({"type": "state"})
            state = await ws.receive_json()
            assert state["type"] == "state" and state["data"]["step_count"] >= 1
            await ws.send_json({"type": "close"})
        await asyncio.sleep(0.05)
    assert sessions.made == sessions.closed == 1 and not sessions.open_sessions


async def test_sixty_four_concurrent_sessions_do_not_cross():
    server, sessions = served()
    async with server, aiohttp.ClientSession() as client:

        async def one(seed: int) -> list[tuple]:
            async with client.ws_connect(server.make_url("/ws")) as ws:
                return await play_over_socket(ws, seed, MOVES)

        played = await asyncio.gather(*(one(seed) for seed in range(64)))
    for seed, episode in enumerate(played):
        assert episode == play_in_process(LAKE, seed, MOVES), seed
    assert sessions.made == sessions.closed == 64


async def test_bad_messages_get_clear_errors_and_the_session_goes_on():
    server, _ = served()
    async with server, aiohttp.ClientSession() as client:
        async with client.ws_connect(server.make_url("/ws")) as ws:

            async def error_for(message) -> dict:
                await (ws.send_str(message) if isinstance(message, str) else ws.send_json(message))
                reply = await ws.receive_json()
                assert reply["type"] == "error", reply
                return reply["data"]

            assert (await error_for({"type": "step", "data": {"text": "Down"}}))["code"] == (
                "VALIDATION_ERROR"  # no episode yet
            )
            assert (await error_for("{not json"))["code"] == "INVALID_JSON"
            assert (await error_for({"type": "jump"}))["code"] == "UNKNOWN_TYPE"
            await ws.send_json({"type": "reset", "data": {"seed": 1}})
            assert (await ws.receive_json())["type"] == "observation"
            error = await error_for({"type": "step", "data": {"move": "Down"}})
            assert error["code"] == "VALIDATION_ERROR" and '"text"' in error["message"]
            error = await error_for({"type": "reset", "data": {"seed": "one"}})
            assert "seed" in error["message"]
            # The episode the bad messages interrupted goes on, as in-process play.
            await ws.send_json({"type": "step", "data": {"text": "Down"}})
            reply = await ws.receive_json()
            assert reply["data"]["observation"]["text"] == play_in_process(LAKE, 1, ["Down"])[1][0]


async def test_a_dropped_connection_closes_its_env_and_capacity_is_kept():
    server, sessions = served(max_sessions=2)
    async with server, aiohttp.ClientSession() as client:
        first = await client.ws_connect(server.make_url("/ws"))
        second = await client.ws_connect(server.make_url("/ws"))
        await first.send_json({"type": "reset", "data": {"seed": 0}})
        await first.receive_json()
        async with client.ws_connect(server.make_url("/ws")) as third:
            reply = await third.receive_json()
            assert reply["type"] == "error" and reply["data"]["code"] == "CAPACITY_REACHED"
        await first.close()  # mid-episode, no close message
        await second.close()
        for _ in range(100):
            if sessions.closed == 2:
                break
            await asyncio.sleep(0.02)
    assert sessions.made == sessions.closed == 2 and not sessions.open_sessions


async def test_a_session_still_making_its_env_holds_its_place():
    """The cap counts sessions whose env is still being made: a connection arriving meanwhile
    is refused, not given a place already promised."""
    release = threading.Event()
    make_lake = ServedEnv(LAKE, {})

    def slow_env():
        release.wait(30)  # an env that takes its time to start (a container, a browser)
        return make_lake()

    sessions = Sessions(slow_env, max_sessions=1)
    server = TestServer(build_app(sessions, ServeSettings(env_id=LAKE)))
    async with server, aiohttp.ClientSession() as client:
        first = await client.ws_connect(server.make_url("/ws"))
        for _ in range(100):  # the first session's env is being made
            if sessions.opening:
                break
            await asyncio.sleep(0.02)
        async with client.ws_connect(server.make_url("/ws")) as second:
            reply = await asyncio.wait_for(second.receive_json(), 10)
            assert reply["data"]["code"] == "CAPACITY_REACHED", reply
        release.set()
        await first.send_json({"type": "reset", "data": {"seed": 0}})
        assert (await asyncio.wait_for(first.receive_json(), 10))["type"] == "observation"
        await first.close()
        for _ in range(100):
            if sessions.closed == 1:
                break
            await asyncio.sleep(0.02)
    assert sessions.made == sessions.closed == 1


async def test_idle_sessions_are_reaped():
    server, sessions = served(idle_timeout_s=0.2, reap_every_s=0.1)
    async with server, aiohttp.ClientSession() as client:
        async with client.ws_connect(server.make_url("/ws")) as ws:
            await ws.send_json({"type": "reset", "data": {"seed": 0}})
            await ws.receive_json()
            for _ in range(50):
                if sessions.closed:
                    break
                await asyncio.sleep(0.05)
            assert sessions.closed == 1 and not sessions.open_sessions


async def test_the_http_routes():
    server, sessions = served()
    async with server, aiohttp.ClientSession() as client:

        async def call(method: str, path: str, **kwargs):
            async with client.request(method, server.make_url(path), **kwargs) as response:
                text = await response.text()
                return response.status, (json.loads(text) if text.startswith("{") else text)

        assert await call("GET", "/health") == (200, {"status": "healthy"})
        status, schema = await call("GET", "/schema")
        assert status == 200 and schema["action"]["required"] == ["text"]
        status, metadata = await call("GET", "/metadata")
        assert metadata["name"] == LAKE
        status, body = await call("POST", "/reset", json={"seed": 4})
        assert status == 200 and body["done"] is False and body["reward"] is None
        assert body["observation"]["text"] == play_in_process(LAKE, 4, [])[0][0]
        status, body = await call("POST", "/step", json={"action": {"text": "Down"}})
        assert status == 200 and isinstance(body["reward"], float)
        status, message = await call("POST", "/step", json={"action": {"move": "Down"}})
        assert status == 422 and "text" in message
        status, message = await call("POST", "/reset", data="{broken")
        assert status == 422 and "invalid JSON" in message
    # Each call that played made and closed an env of its own; a refused body made none.
    assert sessions.made == sessions.closed == 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
async def test_the_command_serves_a_plain_gymnasium_env_in_text_and_stops_on_sigterm():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "rllm_envs", "serve", "CartPole-v1", "--port", str(port)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        said = process.stdout.readline() + process.stdout.readline()
        assert "served in text by rllm/GymText-v0" in said, said
        assert f"serving rllm/GymText-v0 on http://127.0.0.1:{port}" in said, said
        expected = play_in_process("rllm/GymText-v0", 5, ["0", "1"], env_id="CartPole-v1")
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                assert await play_over_socket(ws, 5, ["0", "1"]) == expected
                # SIGTERM with the session open (as `docker stop` comes): the server closes
                # the socket and the session's env at once, not after aiohttp's timeout.
                started = time.monotonic()
                process.send_signal(signal.SIGTERM)
                closing = await ws.receive(timeout=10)
                assert closing.type == aiohttp.WSMsgType.CLOSE, closing
                assert closing.data == aiohttp.WSCloseCode.GOING_AWAY
        code = await asyncio.to_thread(process.wait, 30)
        assert code == 0 and time.monotonic() - started < 10
        assert "stopped: 1 envs made, 1 closed" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


def test_the_command_refuses_what_it_cannot_serve():
    def serve(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "rllm_envs", "serve", *args],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    unknown = serve("rllm/NoSuchEnv-v0")
    assert unknown.returncode == 2 and "not a registered Gymnasium env" in unknown.stderr
    bad_kwargs = serve(LAKE, "--env-kwargs", "[1]")
    assert bad_kwargs.returncode == 2 and "JSON object" in bad_kwargs.stderr


@pytest.mark.slow
def test_the_overhead_benchmark_runs():
    from tests.benchmark_runs import run_benchmark

    said = run_benchmark("serve_overhead.py", "--steps=50", "--sessions=4", "--seconds=0.5").stdout
    assert "added at the median" in said and "served / in-process" in said
