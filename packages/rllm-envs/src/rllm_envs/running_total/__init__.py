"""``rllm/RunningTotal-v0``: keep a running total over several turns, reading the env's feedback.

The multi-turn task ``rllm-train`` trains on by default. Each turn adds one number to a total
the agent must carry from the conversation: after every reply the env says whether it was
right and what the total really is, so a wrong turn can be made good on the next one. The
embedded SmolLM2-135M-Instruct gets 0.41 of the held-out turns right before training (replies
that restate the question, run out of tokens or add to the wrong number) and 0.89 after the
default run's 20 steps, each turn adding to the total the last message gave it. Needs no
extra.

## Observation
First: ``"Start with 4. Add 7. Reply with the total only."``. After each reply:
``"Correct: the total is 11. Add 5."``, ``"Wrong: the total is 11. Add 5."`` or
``"No number found: the total is 11. Add 5."``; the last reply's feedback has no ``Add``.

## Action grammar
Any text; the last integer in it is the total (as in ``rllm/Arithmetic-v0``: ``"4 + 7 = 11"``
answers 11, commas are dropped). A reply without a number is an invalid action
(``info["action_valid"] = False``); the turn is lost and the episode goes on.

## Reward
``1 / additions`` for each turn whose number is the true total after that turn's addition, so
an episode's return is the share of right totals (0, 1/3, 2/3 or 1 by default).
``info["turn_correct"]`` says whether this turn was right.

## Episode end
Terminates after one turn per addend (3 by default), with ``info["is_correct"]``: every total
right. A wrong turn does not end it: the feedback gives the true total to go on from.

## Arguments
``gym.make("rllm/RunningTotal-v0", additions=3, max_start=9, max_add=9, tasks="all",
render_mode=None)``: a task is a start in 1..``max_start`` and ``additions`` addends in
2..``max_add`` (4,608 tasks by default, ids ``total-4-7-5-8``), drawn with the reset seed.
``tasks="test"`` (or ``"shipped:test"``) plays only the 32 held-out tasks, ``"train"`` the 256
training ones (``rllm-eval`` plays the test split unless told otherwise), a list of rows plays
those.
``reset(options={"task": {"start": 4, "addends": [7, 5, 8]}})`` plays one explicit task; a row
without them is a ``ValueError``. The registry's ``running_total`` dataset holds 256 fixed
``train`` tasks and 32 other ``test`` tasks of the default table, so a run validates on tasks
it never trained on. ``metadata["rllm.inline_safe"]`` is True.

## Version history
* v0: first version. Snapshots (``rllm_envs.core.snapshots``): the total and the count of right
  turns; snapshots pickle.
"""

from rllm_envs.running_total.env import (
    ENV_ID,
    RunningTotalEnv,
    held_out_tasks,
    running_total_tasks,
    training_tasks,
)

__all__ = ["ENV_ID", "RunningTotalEnv", "held_out_tasks", "running_total_tasks", "training_tasks"]
