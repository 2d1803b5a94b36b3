"""Every registered id is a well-behaved Gymnasium env: check_env with no warnings, async
vector envs, and the standard wrappers. Ids added to the registry are covered automatically."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from tests.envs.conformance import ALL_IDS, FAST_KWARGS, assert_valid_step, make_env


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_check_env_passes_without_warnings(env_id):
    env = make_env(env_id, fast=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_random_first_action_is_tolerated_and_does_not_truncate(env_id):
    env = make_env(env_id)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        result = env.step(env.action_space.sample())
        assert_valid_step(env, result)
        assert result[3] is False
    finally:
        env.close()


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("env_id", ALL_IDS)
def test_vector_env_matches_single_envs(env_id, mode):
    make_env(env_id).close()  # skip/fail early with a clear reason if it cannot be made
    kwargs = FAST_KWARGS.get(env_id, {})
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, **kwargs)
    try:
        observations, infos = envs.reset(seed=5)
        singles = [make_env(env_id) for _ in range(2)]
        expected = [env.reset(seed=5 + index)[0] for index, env in enumerate(singles)]
        assert list(observations) == expected
        envs.action_space.seed(0)
        for _ in range(3):
            actions = envs.action_space.sample()
            observations, rewards, terminated, truncated, _ = envs.step(actions)
            results = [env.step(action) for env, action in zip(singles, actions, strict=True)]
            assert list(observations) == [result[0] for result in results]
            assert rewards.tolist() == [result[1] for result in results]
            if terminated.any() or truncated.any():
                break  # the vector env resets on its own from here on
        for env in singles:
            env.close()
    finally:
        envs.close()


def test_async_workers_started_by_spawn_find_the_ids_through_the_startup_hook():
    # Spawned workers are fresh interpreters that import gymnasium, never rllm_envs: the ids
    # are there only because the installed start-up hook registered them.
    envs = gym.make_vec(
        "rllm/FrozenLake-v0",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"context": "spawn"},
    )
    try:
        observations, _ = envs.reset(seed=1)
        assert all("FrozenLake" in observation for observation in observations)
    finally:
        envs.close()


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_standard_wrappers(env_id):
    env = gym.wrappers.RecordEpisodeStatistics(
        gym.wrappers.TimeLimit(make_env(env_id), max_episode_steps=3)
    )
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        total, steps = 0.0, 0
        while True:
            observation, reward, terminated, truncated, info = env.step(env.action_space.sample())
            total, steps = total + reward, steps + 1
            if terminated or truncated:
                break
        assert steps <= 3 and (terminated or steps == 3)
        assert info["episode"]["l"] == steps
        assert info["episode"]["r"] == pytest.approx(total)
    finally:
        env.close()
