"""``rllm_test/ReplyLength-v0``: the default task, rewarded by the length of the reply.

The tiny random test model never answers an addition right, so on the default task every reward
is 0, every advantage is 0 and an update moves nothing. Rewarding the reply's length instead
makes the samples of a task differ in reward, so a test's update always has a gradient, and a
run's weights really change from step to step. Importing this module registers the id (a run
names it ``tests.train.reply_length:rllm_test/ReplyLength-v0``).
"""

from __future__ import annotations

import gymnasium as gym

ENV_ID = "rllm_test/ReplyLength-v0"
MODULE_ENV_ID = f"{__name__}:{ENV_ID}"


class RewardByReplyLength(gym.Wrapper):
    """Any text env, its step reward replaced by the reply's length / 50."""

    def step(self, action):
        observation, _, terminated, truncated, info = self.env.step(action)
        return observation, len(str(action)) / 50.0, terminated, truncated, info


def make(**kwargs) -> gym.Env:
    return RewardByReplyLength(gym.make("rllm/Arithmetic-v0", **kwargs))


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make)


# rllm/FrozenLake-v0 as it is (multi-turn moves on a seeded lake), its reward the reply's
# length: a multi-turn env on which the tiny model's samples differ in reward.
LAKE_ENV_ID = "rllm_test/LakeReplyLength-v0"
LAKE_MODULE_ENV_ID = f"{__name__}:{LAKE_ENV_ID}"


def make_lake(**kwargs) -> gym.Env:
    return RewardByReplyLength(gym.make("rllm/FrozenLake-v0", **kwargs))


if LAKE_ENV_ID not in gym.registry:
    gym.register(LAKE_ENV_ID, entry_point=make_lake)


# rllm/Math-v0 (question/answer rows) rewarded by the length of the answer: an agent program
# that answers math problems gets samples that differ in reward from the tiny model.
MATH_ENV_ID = "rllm_test/MathReplyLength-v0"
MATH_MODULE_ENV_ID = f"{__name__}:{MATH_ENV_ID}"


def make_math(**kwargs) -> gym.Env:
    return RewardByReplyLength(gym.make("rllm/Math-v0", **kwargs))


if MATH_ENV_ID not in gym.registry:
    gym.register(MATH_ENV_ID, entry_point=make_math)
