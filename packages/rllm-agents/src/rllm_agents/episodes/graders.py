"""Graders for re-scoring stored episodes, by name (``rllm-eval rescore RUN --grader NAME``).

A grader turns one recorded Episode into a :class:`Score`. The built-in ones, each made with
the run's :class:`~rllm_agents.episodes.envs.RecordedEnvs` for those that need an env:

* ``math``: the recorded answers graded again with ``rllm/Math-v0``'s current grader; no env,
  no model. Reward as the env gives it (1 correct, 0 wrong, minus the recorded
  ``format_penalty`` for a reply without a boxed answer), summed over the episode's answers.
* ``code``: the final recorded program run again against the task's hidden tests in the env's
  sandbox (the recorded backend and policy); no model, no other turn played.
* ``replay``: every recorded action played again on a fresh env; the rewards summed. Works
  for any env with an env record - SWE's edits and its final submit re-run in a new container.
* ``env`` (the default): the env's own - ``math`` for Math, ``code`` for Code, else ``replay``.

Any other reward function: ``--grader module:function`` (or ``path/to/file.py:function``),
called as ``function(episode)`` and returning a reward, a ``{"reward", "is_correct"}`` dict
or a Score.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rllm_agents.episodes.envs import RecordedEnvs, check_replayable
from rllm_agents.types import Episode


@dataclass(frozen=True)
class Score:
    reward: float
    is_correct: bool | None = None


Grader = Callable[[Episode], Score]


def as_score(value: Any) -> Score:
    """What a reward function returned, as a Score."""
    if isinstance(value, Score):
        return value
    if isinstance(value, dict):
        correct = value.get("is_correct")
        return Score(float(value["reward"]), None if correct is None else bool(correct))
    if isinstance(value, bool):
        return Score(float(value), value)
    return Score(float(value))


def recorded_actions(episode: Episode) -> list[Any]:
    """The actions the env got, from the env record; from the first trajectory's steps for
    records without one (format version 1)."""
    if episode.env is not None:
        return [transition.action for transition in episode.env.transitions]
    steps = episode.trajectories[0].steps if episode.trajectories else []
    return [step.action for step in steps]


def task_row(episode: Episode, envs: RecordedEnvs) -> dict[str, Any]:
    """The task the episode played: recorded with it, or (a task drawn from the seed) the
    one its env draws again on reset - no step taken."""
    options = episode.env.options if episode.env is not None else None
    if options and isinstance(options.get("task"), dict):
        return options["task"]
    if isinstance(episode.task, dict) and "seed" not in episode.task:
        return episode.task
    env, _ = envs.reset(check_replayable(episode.env))
    return dict(env.unwrapped.task)


def math_grader(envs: RecordedEnvs) -> Grader:
    from rllm_envs.math import grade_answer

    def grade(episode: Episode) -> Score:
        gold = str(task_row(episode, envs)["answer"])
        kwargs = episode.env.kwargs if episode.env is not None else {}
        penalty = float(kwargs.get("format_penalty", 0.0))
        reward, correct = 0.0, False
        for action in recorded_actions(episode):
            result = grade_answer(str(action), gold)
            correct = result.is_correct
            reward += 1.0 if correct else (0.0 if result.format_ok else -penalty)
        return Score(reward, correct)

    return grade


def code_grader(envs: RecordedEnvs) -> Grader:
    from rllm_envs.code import last_code_block

    def grade(episode: Episode) -> Score:
        env, _ = envs.reset(check_replayable(episode.env))  # sets the task's tests; no step
        actions = recorded_actions(episode)
        code = last_code_block(str(actions[-1])) if actions else None
        if not code or not code.strip():
            return Score(0.0, False)
        reward, report = env.unwrapped.grade(code)  # the env's own rule, as it is today
        return Score(reward, report.all_passed)

    return grade


def replay_grader(envs: RecordedEnvs) -> Grader:
    def grade(episode: Episode) -> Score:
        record = check_replayable(episode.env)
        env, _ = envs.reset(record)
        # A PettingZoo env answers by seat: the episode's reward is its first seat's.
        seat = episode.trajectories[0].name if episode.trajectories else None
        reward, info = 0.0, {}
        for transition in record.transitions:
            _, step_reward, terminated, truncated, info = env.step(transition.action)
            if isinstance(step_reward, dict):
                step_reward, info = step_reward.get(seat, 0.0), info.get(seat, {})
                terminated, truncated = terminated.get(seat), truncated.get(seat)
            reward += float(step_reward)
            if terminated or truncated:
                break
        correct = info.get("is_correct")
        return Score(reward, None if correct is None else bool(correct))

    return grade


# Built-in graders by name: each made with the run's envs (module docstring).
GRADERS: dict[str, Callable[[RecordedEnvs], Grader]] = {
    "math": math_grader,
    "code": code_grader,
    "replay": replay_grader,
}
ENV_GRADER = "env"
# The grader ``env`` picks by the episode's env id (without a "module:" prefix).
ENV_GRADERS: dict[str, str] = {"rllm/Math-v0": "math", "rllm/Code-v0": "code"}
FALLBACK_GRADER = "replay"


def grader_for_env(env_id: str | None) -> str:
    plain = (env_id or "").rpartition(":")[2]
    return ENV_GRADERS.get(plain, FALLBACK_GRADER)
