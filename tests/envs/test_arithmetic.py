"""rllm/Arithmetic-v0, the default training task: grading, seeding, arguments, the deprecated
``rllm_train/Arithmetic-v0`` id, and `gym.make` from a program that never imports rllm.
(check_env, vector envs, wrappers and the fuzz test come from the conformance suite.)"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
import rllm_envs
from gymnasium.utils.env_checker import check_env
from rllm_envs.arithmetic import ArithmeticEnv, last_integer


@pytest.fixture
def env():
    env = gym.make("rllm/Arithmetic-v0")
    yield env
    env.close()


def play(env, a: int, b: int, reply: str):
    observation, info = env.reset(options={"task": {"task_id": f"add-{a}-{b}", "a": a, "b": b}})
    assert observation == f"What is {a} + {b}? Reply with the number only."
    assert info["task_id"] == f"add-{a}-{b}"
    return env.step(reply)


@pytest.mark.parametrize(
    "reply, reward, valid",
    [
        ("8", 1.0, True),
        ("3 + 5 = 8", 1.0, True),  # the last number counts
        ("8, or maybe 9", 0.0, True),
        ("It is 7.", 0.0, True),
        ("eight", 0.0, False),  # no digits: an invalid action, never an error
        ("", 0.0, False),
    ],
)
def test_the_last_number_of_the_reply_is_graded(env, reply, reward, valid):
    observation, got_reward, terminated, truncated, info = play(env, 3, 5, reply)
    assert got_reward == reward and terminated and not truncated  # one turn, always
    assert info["is_correct"] is (reward == 1.0)
    assert info["action_valid"] is valid
    expected = {1.0: "Correct.", 0.0: "Wrong: 3 + 5 = 8." if valid else "No number found"}
    assert observation.startswith(expected[reward])


def test_last_integer_reads_signs_zeros_separators_and_huge_numbers(env):
    assert last_integer("-3 then 1,000") == "1000"
    assert last_integer("minus -4") == "-4"
    assert last_integer("007 or -0") == "0"
    assert last_integer("no digits") is None
    assert play(env, 3, 5, "0008")[1] == 1.0
    # A million-digit reply is a wrong answer, graded at once (int() would refuse it).
    _, reward, terminated, _, info = play(env, 3, 5, "9" * 1_000_000)
    assert reward == 0.0 and terminated and info["action_valid"]


def test_a_seed_alone_picks_the_task_and_every_pair_is_a_task(env):
    first = env.reset(seed=7)
    assert env.reset(seed=7) == first
    seen = {env.reset(seed=seed)[1]["task_id"] for seed in range(2000)}
    assert seen == {f"add-{a}-{b}" for a in range(10) for b in range(10)}
    assert len(env.unwrapped.tasks) == 100


def test_max_operand_sets_the_range_and_bad_values_are_refused():
    env = gym.make("rllm/Arithmetic-v0", max_operand=2)
    assert len(env.unwrapped.tasks) == 9
    check_env(env.unwrapped, skip_render_check=True)
    for bad in (0, -1, 2.5, "9", True):
        with pytest.raises(ValueError, match="max_operand"):
            ArithmeticEnv(max_operand=bad)


def test_old_id_still_makes_the_env_and_warns_with_the_new_id():
    assert "rllm_train/Arithmetic-v0" not in rllm_envs.ENV_IDS  # listed once, under its new id
    for old_id in ("rllm_train/Arithmetic-v0", "rllm_train.default_task:rllm_train/Arithmetic-v0"):
        with pytest.warns(DeprecationWarning, match=r"rllm/Arithmetic-v0"):
            env = gym.make(old_id)
        assert isinstance(env.unwrapped, ArithmeticEnv)
        assert env.reset(seed=3) == gym.make("rllm/Arithmetic-v0").reset(seed=3)
        assert env.step("99")[2]


def test_the_new_id_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym.make("rllm/Arithmetic-v0").reset(seed=0)


def test_the_arithmetic_config_trains_the_new_id_with_its_calculator_prompt():
    from rllm_train.config import build_config
    from rllm_train.native.agent import default_agent_args

    # The first default, kept by name (the default is now rllm/RunningTotal-v0).
    named = build_config("arithmetic")
    assert named.env.id == "rllm/Arithmetic-v0" and named.model.lora_rank == 0
    prompt = {"system_prompt": "You are a calculator."}
    assert default_agent_args("rllm/Arithmetic-v0") == prompt
    # Until the old id goes, a config naming it trains exactly as before.
    assert default_agent_args("rllm_train.default_task:rllm_train/Arithmetic-v0") == prompt


def test_plain_gymnasium_program_makes_both_ids_without_importing_rllm():
    code = (
        "import sys, warnings, gymnasium as gym\n"
        "warnings.simplefilter('error')\n"
        "print(gym.make('rllm/Arithmetic-v0').reset(seed=0)[0])\n"
        "warnings.simplefilter('ignore')\n"
        "gym.make('rllm_train/Arithmetic-v0')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('rllm')}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert result.returncode == 0, result.stderr
    question, modules = result.stdout.splitlines()
    assert question.startswith("What is ")
    # Only the start-up hook and rllm-envs itself: the trainer is not needed for its task.
    assert modules == "['rllm_envs', 'rllm_envs_autoregister']"
