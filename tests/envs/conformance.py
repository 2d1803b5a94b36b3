"""Shared by the conformance and fuzz tests: how to make each registered id in a test."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from rllm_envs import ENV_IDS

from tests.parts import require_part

# Per-id make kwargs that keep the vector, wrapper and fuzz tests fast. check_env always uses
# the defaults (every id must pass it as users make it).
FAST_KWARGS: dict[str, dict[str, Any]] = {
    # Random text rarely parses as a web action: long episodes mean few (costly) resets.
    "rllm/Web-v0": {"max_turns": 200},
    # Random text is never a tool call: long episodes keep the (graded, seconds-long) episode
    # ends to a handful in 2,000 fuzz actions.
    "rllm/SWE-v0": {"max_turns": 500},
    "rllm/Harbor-v0": {"max_turns": 500},
}

ALL_IDS = tuple(ENV_IDS)


def make_env(env_id: str, *, fast: bool = True, **kwargs: Any) -> gym.Env:
    """`gym.make`, skipping (locally) or failing (under CI) when the env's extra is missing."""
    options = {**(FAST_KWARGS.get(env_id, {}) if fast else {}), **kwargs}
    try:
        return gym.make(env_id, **options)
    except ImportError as error:  # MissingExtraError is one; CI installs every extra
        require_part(False, f"{env_id} cannot be made here: {error}")
        raise  # unreachable: require_part skips or fails


def assert_valid_step(env: gym.Env, result: tuple) -> None:
    assert isinstance(result, tuple) and len(result) == 5
    observation, reward, terminated, truncated, info = result
    assert env.observation_space.contains(observation), repr(observation)[:200]
    assert isinstance(reward, float) and reward == reward  # not NaN
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert isinstance(info, dict)
