"""Any Gymnasium env trains with no change to rllm: a third-party text env and CartPole."""

from __future__ import annotations

import math
import re
import string
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.envs.registration import register, registry
from rllm_train import AgentTrainer

from tests.train.conftest import run_overrides

THIRD_PARTY_ID = "tests_train/Vowels-v0"


class VowelCountEnv(gym.Env):
    """A user's own text env, knowing nothing of rllm: count the vowels of a word."""

    WORDS = ("banana", "sky", "queue", "rhythm", "orange", "tree")

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Text(200, charset=string.printable)
        self.action_space = gym.spaces.Text(200, charset=string.printable)
        self.word = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.word = self.WORDS[int(self.np_random.integers(len(self.WORDS)))]
        return f"How many vowels does '{self.word}' have?", {"task_id": self.word}

    def step(self, action):
        numbers = re.findall(r"\d+", str(action))
        correct = bool(numbers) and int(numbers[-1]) == sum(c in "aeiou" for c in self.word)
        return "done", float(correct), True, False, {"is_correct": correct}


if THIRD_PARTY_ID not in registry:
    register(id=THIRD_PARTY_ID, entry_point=VowelCountEnv)


def test_third_party_env_from_its_own_module_trains(tmp_path, tiny_model):
    # "module:id" makes the trainer import this module, which registers the env.
    overrides = run_overrides(tmp_path / "run", tiny_model)
    trainer = AgentTrainer(env_id=f"{__name__}:{THIRD_PARTY_ID}", config=overrides)
    rows = trainer.train()
    assert [row["step"] for row in rows] == [1, 2]
    assert all(math.isfinite(row["loss"]) for row in rows)
    assert all(row["sequences"] == 4 and row["failures"] == 0 for row in rows)
    assert set(rows[0]["task_ids"]) <= set(VowelCountEnv.WORDS)


@pytest.mark.slow
def test_cartpole_trains_through_gymtext(tmp_path, tiny_model):
    overrides = run_overrides(
        tmp_path / "run",
        tiny_model,
        **{
            "rollout.max_turns": 3,
            "rollout.max_response_tokens": 4,
            "trainer.steps": 1,
        },
    )
    rows = AgentTrainer(
        env_id="rllm/GymText-v0", env_args={"env_id": "CartPole-v1"}, config=overrides
    ).train()
    [row] = rows
    assert math.isfinite(row["loss"]) and row["failures"] == 0
    assert row["episodes"] == 4
