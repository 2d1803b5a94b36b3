"""``rllm/Remote-v0`` against a real ``rllm-envs serve`` process: Gymnasium's checks pass, its
episodes are the served env's in-process episodes, the async API plays it, and a server that
goes away ends the episode as an infrastructure failure, not a crash."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm ids
from gymnasium.utils.env_checker import check_env
from rllm_envs.core.async_env import areset, astep

from tests.envs.test_serve import LAKE, MOVES, free_port, play, play_in_process

REPO_ROOT = Path(__file__).resolve().parents[2]


def serve(env_id: str, *options: str) -> tuple[subprocess.Popen, str]:
    """`rllm-envs serve env_id` as a child process, and its address once it listens."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "rllm_envs", "serve", env_id, "--port", str(port), *options],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    line = process.stdout.readline()
    assert "serving" in line, line + process.stdout.read()
    return process, f"http://127.0.0.1:{port}"


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    process.stdout.close()


@pytest.fixture(scope="module")
def lake_server():
    process, url = serve(LAKE)
    yield url
    stop(process)
    assert process.returncode == 0


def test_a_remote_env_passes_gymnasiums_checks(lake_server):
    env = gym.make("rllm/Remote-v0", url=lake_server, env=LAKE)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_remote_episodes_are_the_served_envs_episodes(lake_server):
    env = gym.make("rllm/Remote-v0", url=lake_server)
    try:
        for seed in (0, 3, 11):
            assert play(env, seed, MOVES) == play_in_process(LAKE, seed, MOVES)
        # A finished episode says so, as local envs do, until the next reset.
        _, _, terminated, truncated, info = env.step("Down")
        assert truncated and not terminated and info["action_valid"] is False
    finally:
        env.close()


async def test_the_async_api_plays_remote_envs_side_by_side(lake_server):
    envs = [gym.make("rllm/Remote-v0", url=lake_server) for _ in range(8)]

    async def play(env: gym.Env, seed: int) -> list:
        observation, _ = await areset(env, seed=seed)
        played = [observation]
        for action in MOVES:
            observation, _, terminated, truncated, _ = await astep(env, action)
            played.append(observation)
            if terminated or truncated:
                break
        return played

    try:
        results = await asyncio.gather(*(play(env, seed) for seed, env in enumerate(envs)))
    finally:
        for env in envs:
            env.close()
    for seed, observations in enumerate(results):
        assert observations == [turn[0] for turn in play_in_process(LAKE, seed, MOVES)]


def test_the_server_describes_its_env(lake_server):
    import json
    import urllib.request

    with urllib.request.urlopen(f"{lake_server}/metadata", timeout=10) as response:
        metadata = json.loads(response.read())
    assert metadata["name"] == LAKE
    assert metadata["description"].startswith("``rllm/FrozenLake-v0``: cross a frozen lake")


def test_a_server_serving_another_env_is_refused(lake_server):
    env = gym.make("rllm/Remote-v0", url=lake_server, env="rllm/Math-v0")
    with pytest.raises(ValueError, match="serves 'rllm/FrozenLake-v0', not 'rllm/Math-v0'"):
        env.reset(seed=0)
    env.close()


def test_no_server_is_a_clear_error():
    env = gym.make("rllm/Remote-v0", url=f"http://127.0.0.1:{free_port()}", connect_timeout=2)
    with pytest.raises(ConnectionError, match="cannot reach ws://127.0.0.1"):
        env.reset(seed=0)
    env.close()
    with pytest.raises(ValueError, match="give the server's address"):
        gym.make("rllm/Remote-v0", url="127.0.0.1:8000")


def test_a_server_gone_mid_episode_ends_it_as_an_infrastructure_failure():
    process, url = serve(LAKE)
    env = gym.make("rllm/Remote-v0", url=url)
    try:
        env.reset(seed=0)
        process.kill()
        process.wait()
        observation, reward, terminated, truncated, info = env.step("Down")
        assert truncated and not terminated and reward == 0.0
        assert info["failure"] == "remote" and "failed" in observation
        with pytest.raises(ConnectionError):
            env.reset(seed=0)  # nothing to reconnect to
    finally:
        env.close()
        stop(process)
