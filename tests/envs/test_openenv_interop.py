"""OpenEnv's own client (``openenv-core``'s GenericEnvClient) plays whole episodes against
``rllm-envs serve``, for three env ids, with the observations and rewards of in-process play
for the same seeds and actions."""

from __future__ import annotations

import json

import pytest

from tests.envs.test_remote import serve, stop
from tests.envs.test_serve import LAKE, MOVES, play_in_process
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
