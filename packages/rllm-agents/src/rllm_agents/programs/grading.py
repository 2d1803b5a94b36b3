"""Grading a program's final answer with the env it was given, by playing the env's own rules.

A program that returns an ``answer`` instead of a ``reward`` leaves the score to the env: the
env is reset on the same task row (``reset(seed, options={"task": row})``) and stepped once
with the answer as the action. The step's reward is the episode's, its ``info["is_correct"]``
the episode's correctness, and an ``info["failure"]`` (the grader crashed, a sandbox did not
start) an infrastructure failure as in any other episode. For ``rllm/Math-v0`` that is the
env's boxed-answer grader with math-verify; for any other text env, whatever its ``step`` does
with one action.

Envs are kept in a pool of :class:`~rllm_agents.execution.env_slot.EnvSlot` s (each env on its
own worker thread, as the execution engine runs them) and reused from answer to answer; an env
that raised is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.execution.env_slot import EnvSlot


@dataclass(frozen=True)
class Grade:
    reward: float
    is_correct: bool | None
    failure: str | None  # the env's infrastructure failure kind, if any
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)


class EnvGrader:
    """Grades answers on envs from `env_factory` (see the module docstring)."""

    def __init__(self, env_factory: Callable[[], Any], calls: str = "auto") -> None:
        self.env_factory = env_factory
        self.calls = calls
        self._free: list[EnvSlot] = []
        self._made = 0

    async def grade(self, task: dict[str, Any], answer: str, seed: int | None = None) -> Grade:
        slot = self._free.pop() if self._free else self._new_slot()
        started = time.perf_counter()
        try:
            _, reset_info = await slot.call("reset", seed=seed, options={"task": dict(task)})
            if reset_info.get("failure"):
                step_info: dict[str, Any] = dict(reset_info)
                reward = 0.0
            else:
                _, reward, _, _, step_info = await slot.call("step", answer)
        except BaseException:
            slot.discard()  # the env raised (or the grading was cancelled): never reused
            self._free.append(slot)
            raise
        self._free.append(slot)
        correct = step_info.get("is_correct")
        return Grade(
            reward=float(reward),
            is_correct=None if correct is None else bool(correct),
            failure=str(step_info["failure"]) if step_info.get("failure") else None,
            seconds=time.perf_counter() - started,
            info=dict(step_info),
        )

    async def aclose(self) -> None:
        """Close every env (a later grade makes new ones)."""
        slots, self._free = self._free, []
        for slot in slots:
            await slot.aclose()

    def _new_slot(self) -> EnvSlot:
        self._made += 1
        return EnvSlot(self.env_factory, f"rllm-grader-{self._made}", self.calls)
