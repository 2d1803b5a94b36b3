"""rllm/GymText-v0: any Gymnasium env in text, for every space type an agent can act in."""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
import rllm_envs  # noqa: F401
from gymnasium import spaces
from gymnasium.envs.registration import registry
from gymnasium.utils.env_checker import check_env
from rllm_envs.gymtext import codecs

DICT_ACTION_ID = "rllm_tests/DictAction-v0"


class DictActionEnv(gym.Env):
    """A real env whose Dict action space GymText cannot write actions for."""

    observation_space = spaces.Discrete(2)
    action_space = spaces.Dict({"a": spaces.Discrete(2)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, True, False, {}


def test_cartpole_in_text_matches_the_raw_env_step_for_step():
    env = gym.make("rllm/GymText-v0")  # CartPole-v1 by default
    raw = gym.make("CartPole-v1")
    observation, info = env.reset(options={"task": {"seed": 7}})
    raw_observation, _ = raw.reset(seed=7)
    assert "CartPole-v1" in observation and "one integer from 0 to 1" in observation
    assert observation.endswith("Observation: " + codecs.render_array(raw_observation))
    actions = [1, 0, 0, 1, 1, 1] * 100
    for turn, action in enumerate(actions, 1):
        observation, reward, terminated, truncated, info = env.step(f"I push `{action}`")
        raw_observation, raw_reward, raw_terminated, raw_truncated, _ = raw.step(action)
        assert "Observation: " + codecs.render_array(raw_observation) in observation
        assert (reward, terminated, truncated) == (raw_reward, raw_terminated, raw_truncated)
        assert info["action"] == action and info["turn"] == turn
        if terminated or truncated:
            break
    assert terminated and "The episode is over." in observation


def test_invalid_actions_do_not_step_the_inner_env():
    env = gym.make("rllm/GymText-v0", format_penalty=0.5)
    env.reset(seed=3)
    cart = env.unwrapped.inner.unwrapped
    state = np.array(cart.state)
    for reply, problem in [
        ("2", "not one integer from 0 to 1"),
        ("push left", "nothing else"),
        ("0.5", "whole numbers"),
        ("", "empty"),
        ("1 1", "expected 1 number(s), got 2"),
    ]:
        observation, reward, terminated, truncated, info = env.step(reply)
        assert problem in observation and "did not advance" in observation
        assert info["action_valid"] is False and reward == -0.5
        assert not terminated and not truncated
        np.testing.assert_array_equal(cart.state, state)
    env.step("1")
    assert not np.array_equal(cart.state, state)


def test_seed_picks_the_episode():
    env = gym.make("rllm/GymText-v0")
    first = env.reset(seed=42)
    assert env.reset(seed=42) == first
    assert len({env.reset(seed=seed)[0] for seed in range(5)}) == 5
    assert first[1]["task_id"].startswith("CartPole-v1/seed-")


def test_inner_kwargs_pass_through_and_the_inner_time_limit_truncates():
    env = gym.make("rllm/GymText-v0", env_id="CartPole-v1", max_episode_steps=3)
    env.reset(seed=0)
    results = [env.step("0" if turn % 2 else "1") for turn in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    lake = gym.make("rllm/GymText-v0", env_id="FrozenLake-v1", map_name="8x8", is_slippery=False)
    observation, _ = lake.reset(seed=0)
    assert "one integer from 0 to 63" in observation and "Observation: 0" in observation
    observation, *_ = lake.step("2")  # Right on solid ice
    assert observation.endswith("Observation: 1")


def test_continuous_actions_respect_the_box_bounds():
    env = gym.make("rllm/GymText-v0", env_id="Pendulum-v1")
    observation, _ = env.reset(seed=0)
    assert "1 number (shape (1,)), between -2 and 2" in observation
    for reply in ["[0.5]", "Action: -2", "`1.5e0`"]:
        assert env.step(reply)[4]["action_valid"] is True
    for reply in ["3", "nan", "-inf", "[1, 1]", "[]"]:
        assert env.step(reply)[4]["action_valid"] is False


def test_unsupported_action_space_is_a_clear_error():
    if DICT_ACTION_ID not in registry:
        gym.register(DICT_ACTION_ID, entry_point=DictActionEnv)
    with pytest.raises(ValueError, match="reads actions of Discrete"):
        gym.make("rllm/GymText-v0", env_id=DICT_ACTION_ID)


def test_close_is_idempotent():
    env = gym.make("rllm/GymText-v0")
    env.reset(seed=0)
    env.close()
    env.close()


@pytest.mark.parametrize(
    ("space", "reply", "expected"),
    [
        (spaces.Discrete(3, start=-1), "-1", -1),
        (spaces.Discrete(3, start=-1), "`1`", 1),
        (spaces.MultiDiscrete([3, 2], start=[1, 0]), "[3, 1]", [3, 1]),
        (spaces.MultiDiscrete([[2, 2], [2, 2]]), "1 0 0 1", [[1, 0], [0, 1]]),
        (spaces.MultiBinary(4), "[1,0,1,1]", [1, 0, 1, 1]),
        (spaces.Box(0, 10, (2,), dtype=np.int64), "3, 10", [3, 10]),
        (spaces.Box(-1.0, 1.0, (2, 2)), "[[0.5, -0.5], [1, -1]]", [[0.5, -0.5], [1, -1]]),
        (spaces.Box(-np.inf, np.inf, (1,)), "1e6", [1e6]),
        (spaces.Text(5, charset="abc"), "`cab`", "cab"),
        (spaces.Text(5, charset="abc"), "<think>no</think>aa", "aa"),
    ],
)
def test_parse_reads_each_space_type(space, reply, expected):
    action = codecs.parse_action(space, reply)
    assert space.contains(action)
    assert (action.tolist() if isinstance(action, np.ndarray | np.generic) else action) == expected


@pytest.mark.parametrize(
    ("space", "reply", "problem"),
    [
        (spaces.MultiDiscrete([3, 2], start=[1, 0]), "[0, 1]", "out of range"),
        (spaces.MultiDiscrete([3, 2]), "1", "expected 2 number(s), got 1"),
        (spaces.MultiBinary(3), "1 2 0", "other than 0 and 1"),
        (spaces.Box(0, 10, (1,), dtype=np.int64), "2.5", "whole numbers"),
        (spaces.Box(-1.0, 1.0, (1,)), "1.5", "is not between -1 and 1"),
        (spaces.Text(5, charset="abc"), "abcd!", "not allowed"),
        (spaces.Text(3, min_length=2, charset="abc"), "abcabc", "must have 2 to 3"),
    ],
)
def test_parse_rejects_actions_outside_the_space(space, reply, problem):
    with pytest.raises(codecs.MessageError, match=re.escape(problem)):
        codecs.parse_action(space, reply)


def test_nested_observation_spaces_render_and_describe():
    space = spaces.Dict(
        {"pos": spaces.Box(-1, 1, (2,)), "mode": spaces.Tuple((spaces.Discrete(2), spaces.Text(4)))}
    )
    value = {"pos": np.array([0.25, -1.0], dtype=np.float32), "mode": (1, "ab")}
    assert codecs.render(space, value) == '{mode: (1, "ab"), pos: [0.25, -1]}'
    assert codecs.describe(space).startswith(
        "a mapping: mode: a tuple: [0] one integer from 0 to 1"
    )
    for action_space in [spaces.Discrete(4), spaces.Box(-2, 3, (3,)), spaces.MultiBinary(2)]:
        assert action_space.contains(
            codecs.parse_action(action_space, codecs.example_action(action_space))
        )


@pytest.mark.parametrize(
    "inner_id",
    ["Pendulum-v1", "MountainCarContinuous-v0", "Acrobot-v1", "Blackjack-v1", "Taxi-v4"],
)
def test_other_inner_envs_pass_check_env_without_warnings(inner_id):
    env = gym.make("rllm/GymText-v0", env_id=inner_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
        observation, _ = env.reset(seed=0)
        example = codecs.example_action(env.unwrapped.inner.action_space)
        assert env.step(f"`{example}`")[4]["action_valid"] is True
    finally:
        env.close()


def test_show_ansi_adds_the_inner_text_picture_without_colour_codes():
    env = gym.make("rllm/GymText-v0", env_id="FrozenLake-v1", show_ansi=True, is_slippery=False)
    observation, _ = env.reset(seed=0)
    assert "SFFF" in observation and "\x1b" not in observation
    observation, *_ = env.step("1")
    assert "(Down)" in observation and "\x1b" not in observation
    with pytest.raises(ValueError, match="no 'ansi' render mode"):
        gym.make("rllm/GymText-v0", env_id="Pendulum-v1", show_ansi=True)
