"""Interop with OpenEnv's own code (``openenv-core``): its client (GenericEnvClient) plays whole
episodes against ``rllm-envs serve``, for three env ids, with the observations and rewards of
in-process play for the same seeds and actions; and rllm/Remote-v0 plays an env served by its
server code (``create_app``, tests/envs/openenv_guess_server.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.envs.test_remote import serve, stop
from tests.envs.test_serve import LAKE, MOVES, free_port, play_in_process
from tests.parts import require_module

CODE_TRIES = [
    "I think this works:\n```python\ndef f(x):\n    return x\n```",
    "no code block this time",
]
MATH_TRIES = ["The answer is \\boxed{4}.", "\\boxed{12}"]
CASES = {
    LAKE: ({}, MOVES, (0, 5)),
    "rllm/Math-v0": ({"tasks": "shipped:gsm8k_test", "max_turns": 2}, MATH_TRIES, (0, 1)),
    "rllm/Code-v0": ({"tasks": "shipped:humaneval", "max_turns": 2}, CODE_TRIES, (2,)),
}


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(CASES))
def test_openenvs_client_plays_served_episodes_as_in_process(env_id):
    require_module("openenv", "openenv-core (OpenEnv's client) comes with the dev install")
    from openenv.core.generic_client import GenericEnvClient

    kwargs, actions, seeds = CASES[env_id]
    process, url = serve(env_id, "--env-kwargs", json.dumps(kwargs))
    try:
        with GenericEnvClient(base_url=url).sync() as client:
            for seed in seeds:
                expected = play_in_process(env_id, seed, actions, **kwargs)
                first = client.reset(seed=seed)
                played = [(first.observation["text"], first.reward, False, False)]
                for action in actions[: len(expected) - 1]:
                    result = client.step({"text": action})
                    observation = result.observation
                    played.append(
                        (
                            observation["text"],
                            result.reward,
                            observation["terminated"],
                            observation["truncated"],
                        )
                    )
                    assert result.done == (observation["terminated"] or observation["truncated"])
                assert played == expected, (env_id, seed)
    finally:
        stop(process)


@pytest.mark.slow
def test_remote_env_plays_an_env_served_by_openenvs_own_server():
    require_module("openenv", "openenv-core (OpenEnv's server) comes with the dev install")
    import gymnasium as gym
    import rllm_envs  # noqa: F401 - registers the rllm ids

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("openenv_guess_server.py")), str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    env = gym.make("rllm/Remote-v0", url=f"http://127.0.0.1:{port}", action_field="guess")
    try:
        wait_for_health(f"http://127.0.0.1:{port}/health", server)
        observation, _ = env.reset(seed=17)  # the secret is 7
        assert json.loads(observation) == {"hint": "guess a digit"}
        observation, reward, terminated, truncated, _ = env.step("3")
        assert json.loads(observation)["hint"] == "higher" and reward == 0.0
        assert not (terminated or truncated)
        observation, reward, terminated, truncated, _ = env.step("7")
        assert json.loads(observation)["hint"] == "right"
        assert reward == 1.0 and terminated and not truncated  # OpenEnv's done, as terminated
        # A structured action the server's model refuses is an invalid action, not a crash.
        env.reset(seed=2)
        raw = gym.make("rllm/Remote-v0", url=f"http://127.0.0.1:{port}", action_field=None)
        try:
            raw.reset(seed=2)
            observation, reward, _, truncated, info = raw.step('{"wrong_field": 1}')
            assert info["action_valid"] is False and not truncated and reward == 0.0
            _, reward, terminated, _, _ = raw.step('{"guess": "2"}')
            assert reward == 1.0 and terminated
        finally:
            raw.close()
    finally:
        env.close()
        server.terminate()
        server.wait(timeout=30)
        server.stderr.close()


def wait_for_health(url: str, server: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read()[-3000:]
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the OpenEnv server did not answer {url} in {timeout} s")
