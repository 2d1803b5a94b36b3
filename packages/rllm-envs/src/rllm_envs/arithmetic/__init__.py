"""``rllm/Arithmetic-v0``: single-digit addition in one turn (``rllm-train --config arithmetic``).

Chosen so that a small model (the embedded SmolLM2-135M-Instruct) already earns reward on a
fair share of prompts - GRPO learns nothing from a group whose rewards are all equal - and a
CPU run shows the reward rise within minutes. It was ``rllm-train``'s default task; the default
is now ``rllm/RunningTotal-v0``, where the model starts low and acts over several turns. Needs
no extra.

## Observation
One line: ``"What is 3 + 5? Reply with the number only."``. After the reply: ``"Correct."``,
``"Wrong: 3 + 5 = 8."`` or ``"No number found in the reply."``.

## Action grammar
Any text; the last integer in it is the answer (``"3 + 5 = 8"``, ``"8"`` and ``"008"`` all
answer 8; commas are dropped first, so ``"1,000"`` reads as 1000; numbers of any length are
read). A reply without a number is an invalid action (``info["action_valid"] = False``).

## Reward
1.0 when the answer is the sum, else 0.0 (an invalid action earns 0.0 too).

## Episode end
One turn: the episode terminates after the first reply, with ``info["is_correct"]``.

## Arguments
``gym.make("rllm/Arithmetic-v0", max_operand=9, render_mode=None)``: operands run from 0 to
``max_operand``; every (a, b) pair is one task (100 by default, ids ``add-a-b``), drawn with
the reset seed. ``reset(options={"task": {"a": 3, "b": 5}})`` plays one explicit pair.
The registry's ``arithmetic`` dataset splits the default table: ``test`` holds one pair in five
(``is_held_out``: ``(3a + b) % 5 == 0``, 20 pairs), ``train`` the other 80, so a run can be
validated on pairs it never trained on.
``metadata["rllm.inline_safe"]`` is True: calls never block and may come from any thread.

## Version history
* v0: first version, registered as ``rllm_train/Arithmetic-v0`` by ``rllm_train``. Moved to
  rllm-envs as ``rllm/Arithmetic-v0`` (same tasks and reward); the old id still makes it, with
  a ``DeprecationWarning``, and goes away in the next version.
* v0, snapshots: ``snapshot`` / ``restore`` / ``fork`` (``rllm_envs.core.snapshots``): the
  task and whether it was answered; snapshots pickle. Same id: no change to the episodes.
"""

from rllm_envs.arithmetic.env import (
    DEPRECATED_ENV_ID,
    ENV_ID,
    ArithmeticEnv,
    DeprecatedArithmeticEnv,
    addition_tasks,
    held_out_pairs,
    is_held_out,
    last_integer,
    training_pairs,
)

__all__ = [
    "DEPRECATED_ENV_ID",
    "ENV_ID",
    "ArithmeticEnv",
    "DeprecatedArithmeticEnv",
    "addition_tasks",
    "held_out_pairs",
    "is_held_out",
    "last_integer",
    "training_pairs",
]
