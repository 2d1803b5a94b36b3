"""``rllm_train/Arithmetic-v0``: the embedded default task, single-digit addition.

The task `rllm-train` trains on when run with no arguments. It is chosen so that the small
embedded model (SmolLM2-135M-Instruct) already earns reward on a fair share of prompts - GRPO
learns nothing from a group whose rewards are all equal - and a CPU run shows the reward rise
within minutes.

## Observation
``"What is 3 + 5? Reply with the number only."``

## Action grammar
Any text; the last integer in it is the answer (``"3 + 5 = 8"`` and ``"8"`` both answer 8).
A reply without a number is an invalid action (``info["action_valid"] = False``).

## Reward and episode end
1.0 when the answer is the sum, else 0.0; ``info["is_correct"]``. One turn: the episode
terminates after the first reply.

## Arguments
``gym.make("rllm_train/Arithmetic-v0", max_operand=9)``: operands run from 0 to
``max_operand``; every (a, b) pair is one task (100 by default), drawn with the reset seed.

## Version history
* v0: first version.
"""

from __future__ import annotations

import re
from typing import Any

from rllm_envs.core.tasks import Row, TaskSet
from rllm_envs.core.text_env import TextEnv, Transition

ENV_ID = "rllm_train/Arithmetic-v0"
# What the trainer gives the env's agent by default: a short system prompt keeps the prompt
# (most of the compute of a 10-token answer) small and asks for a bare number.
AGENT_ARGS = {"system_prompt": "You are a calculator."}
_INTEGER = re.compile(r"-?\d+")


def addition_tasks(max_operand: int) -> TaskSet:
    rows = tuple(
        {"task_id": f"add-{a}-{b}", "a": a, "b": b}
        for a in range(max_operand + 1)
        for b in range(max_operand + 1)
    )
    return TaskSet(f"addition-0-{max_operand}", rows)


def last_integer(text: str) -> int | None:
    found = _INTEGER.findall(text.replace(",", ""))
    return int(found[-1]) if found else None


class ArithmeticEnv(TextEnv):
    """Single-digit addition, graded on the last number of the reply (see the module doc)."""

    def __init__(self, max_operand: int = 9, render_mode: str | None = None) -> None:
        if max_operand < 1:
            raise ValueError(f"max_operand must be at least 1, got {max_operand}")
        super().__init__(addition_tasks(max_operand), max_turns=1, render_mode=render_mode)

    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        return f"What is {task['a']} + {task['b']}? Reply with the number only.", {}

    def act(self, action: str) -> Transition:
        assert self.task is not None
        answer = last_integer(action)
        expected = int(self.task["a"]) + int(self.task["b"])
        correct = answer == expected
        if answer is None:
            feedback = "No number found in the reply."
        else:
            feedback = (
                "Correct."
                if correct
                else f"Wrong: {self.task['a']} + {self.task['b']} = {expected}."
            )
        info = {"is_correct": correct, "action_valid": answer is not None}
        return Transition(feedback, reward=float(correct), terminated=True, info=info)


def _register() -> None:
    from gymnasium.envs.registration import register, registry

    if ENV_ID not in registry:
        register(id=ENV_ID, entry_point="rllm_train.default_task:ArithmeticEnv")


_register()
