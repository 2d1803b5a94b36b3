"""`JudgeReward`: a Gymnasium wrapper whose episode-end reward is a judge's score.

``JudgeReward(env, judge)`` keeps the episode's transcript (the first observation as the task,
then every action and the observation it got), and on the step that ends the episode
(terminated or truncated by the env or a wrapper inside this one) asks ``judge`` for a pointwise
score on 0..1. With ``use="replace"`` (the default) the env's rewards are withheld (each step
returns 0.0) and the last step returns ``weight * score``; with ``use="add"`` the env's rewards
pass through and the last step adds ``weight * score``. The env's own reward of each step is in
``info["env_reward"]``; the last step's ``info["judge"]`` holds the call: prompt, raw reply,
score, parse failure. With ``log_path`` every call is also appended to that JSON-lines file.

An episode that the caller cuts short (an agent loop's turn limit) never reaches an end the
wrapper sees, so it is not judged. A judge whose engine fails ends nothing early: the last
step gets the env's reward alone (0.0 with replace) and ``info["failure"] = "judge"``, the
contract's mark of an infrastructure failure that trainers leave out.

The judge's call blocks the step: the wrapper declares ``metadata["rllm.inline_safe"] =
False`` so the execution engine runs it off its event loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

from rllm_agents.rewards.judge import Judge, JudgeFailed, JudgeLog
from rllm_agents.rewards.judge_prompt import Turn, as_text

REWARD_USES = ("replace", "add")
JUDGE_FAILURE = "judge"  # info["failure"] when the judge's engine failed


class JudgeReward(gym.Wrapper):
    """The judge's pointwise score as the episode's reward (module doc)."""

    def __init__(
        self,
        env: gym.Env,
        judge: Judge,
        *,
        use: str = "replace",
        weight: float = 1.0,
        log_path: str | Path | None = None,
    ) -> None:
        if use not in REWARD_USES:
            raise ValueError(f"use must be one of {REWARD_USES}, got {use!r}")
        super().__init__(env)
        self.judge = judge
        self.use = use
        self.weight = float(weight)
        self.log = JudgeLog(log_path) if log_path is not None else None
        self.metadata = {**env.metadata, "rllm.inline_safe": False}
        self._turns: list[Turn] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        self._turns = [Turn("task", as_text(observation))]
        return observation, info

    def step(self, action: Any):
        observation, env_reward, terminated, truncated, info = self.env.step(action)
        info = {**info, "env_reward": float(env_reward)}
        self._turns.append(Turn("agent", as_text(action)))
        reward = float(env_reward) if self.use == "add" else 0.0
        if not (terminated or truncated):
            self._turns.append(Turn("env", as_text(observation)))
            return observation, reward, terminated, truncated, info
        try:
            call = self.judge.run(self.judge.score([tuple(self._turns)]))
        except JudgeFailed as failed:
            call = failed.call
            info.setdefault("failure", JUDGE_FAILURE)
        else:
            reward += self.weight * call.scores[0]
        info["judge"] = call.to_dict()
        if self.log is not None:
            self.log.write(call, task_id=info.get("task_id"))
        return observation, reward, terminated, truncated, info
