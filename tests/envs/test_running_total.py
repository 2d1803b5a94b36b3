"""rllm/RunningTotal-v0, the default training task: per-turn grading against the true total,
feedback that lets a wrong turn be made good, the shipped splits, bad task rows, snapshots.
(check_env, vector envs, wrappers, golden replay and fuzzing come from the shared suites.)"""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from rllm_envs import DatasetRegistry
from rllm_envs.core.turn_limit import turn_limit
from rllm_envs.running_total import held_out_tasks, running_total_tasks, training_tasks

TASK = {"task_id": "total-4-7-5-8", "start": 4, "addends": [7, 5, 8]}


@pytest.fixture
def env():
    env = gym.make("rllm/RunningTotal-v0")
    yield env
    env.close()


def play(env, replies: list[str]) -> list[tuple]:
    observation, info = env.reset(options={"task": TASK})
    assert observation == "Start with 4. Add 7. Reply with the total only."
    return [env.step(reply) for reply in replies]


def test_each_right_total_earns_a_third_and_the_feedback_gives_the_true_total(env):
    steps = play(env, ["4 + 7 = 11", "16", "24"])
    assert [step[0] for step in steps] == [
        "Correct: the total is 11. Add 5.",
        "Correct: the total is 16. Add 8.",
        "Correct: the total is 24.",
    ]
    assert sum(step[1] for step in steps) == pytest.approx(1.0)
    assert [step[2] for step in steps] == [False, False, True]  # terminated after the last addend
    assert steps[-1][4]["is_correct"] is True and not steps[-1][3]


def test_a_wrong_turn_does_not_end_the_episode_and_the_next_turn_can_recover(env):
    # The untrained model's habit: each new number added to the start, not to the total.
    steps = play(env, ["11", "4 + 5 = 9", "21 + 3 = 24"])
    assert steps[1][0] == "Wrong: the total is 16. Add 8."
    assert [step[4]["turn_correct"] for step in steps] == [True, False, True]
    assert sum(step[1] for step in steps) == pytest.approx(2 / 3)
    assert steps[-1][4]["is_correct"] is False


def test_a_reply_without_a_number_is_an_invalid_turn_not_an_error(env):
    steps = play(env, ["eleven", "", "twenty-four"])
    assert steps[0][0] == "No number found: the total is 11. Add 5."
    assert all(step[4]["action_valid"] is False and step[1] == 0.0 for step in steps)
    assert steps[-1][2] is True


def test_bad_task_rows_are_refused_with_the_fields_a_row_needs(env):
    for row in ({"start": 4}, {"start": "4", "addends": [1]}, {"start": 4, "addends": []}):
        with pytest.raises(ValueError, match="'start' \\(int\\) and 'addends'"):
            env.reset(options={"task": row})
    with pytest.raises(ValueError, match="max_add"):
        gym.make("rllm/RunningTotal-v0", max_add=1)


def test_the_shipped_splits_are_fixed_disjoint_and_in_the_registry():
    train, test = training_tasks(), held_out_tasks()
    assert (len(train), len(test)) == (256, 32)
    assert not {row["task_id"] for row in train} & {row["task_id"] for row in test}
    assert training_tasks() == train  # the same rows every time: validation never moves
    assert len(running_total_tasks().rows) == 9 * 8**3
    assert list(DatasetRegistry.load_dataset("running_total", "test")) == test


def test_the_turn_limit_is_one_turn_per_addend_and_passes_the_env_checker():
    env = gym.make("rllm/RunningTotal-v0", additions=5)
    assert turn_limit(env) == 5
    check_env(env.unwrapped)
    env.close()


def test_a_snapshot_mid_episode_restores_the_total_and_the_score(env):
    play(env, ["11"])
    snap = pickle.loads(pickle.dumps(env.unwrapped.snapshot()))
    first = env.step("16")
    env.unwrapped.restore(snap)
    assert env.step("16")[:2] == first[:2]
    assert env.step("24")[4]["is_correct"] is True


def test_tasks_chooses_a_split_and_rllm_eval_plays_the_held_out_one():
    from rllm_envs.core.shipped_datasets import held_out_tasks_argument

    for name in ("test", "shipped:test"):
        env = gym.make("rllm/RunningTotal-v0", tasks=name)
        assert list(env.unwrapped.tasks.rows) == held_out_tasks()
        env.close()
    assert held_out_tasks_argument("rllm/RunningTotal-v0") == "shipped:test"
    rows = [{"task_id": "mine", "start": 1, "addends": [2]}]
    assert gym.make("rllm/RunningTotal-v0", tasks=rows).unwrapped.tasks.rows == tuple(rows)
    with pytest.raises(ValueError, match="'all', 'train', 'test' or a list of rows"):
        gym.make("rllm/RunningTotal-v0", tasks="validation")
