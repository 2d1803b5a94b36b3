"""``rllm/FrozenLake-v0``: cross a frozen lake to the goal, in text.

Gymnasium's FrozenLake (``gymnasium.envs.toy_text.frozen_lake``) with its own dynamics, drawn as
a text board and steered with words. The dynamics are applied per step
(``rllm_envs.frozenlake.dynamics``) rather than from Gymnasium's prebuilt transition table: same
moves, slips, rewards and random draws, without a table to build for every new lake. Each task's lake is generated from the task's seed, so
a seed alone picks the task and the same seed gives the same episode.

## Observation
Text. The first observation explains the game, the legend (``P`` you, ``S`` start,
``F`` frozen ice, ``H`` hole, ``G`` goal), the slippery rule when it applies, the number of
moves and how to answer, then the board, one row a line, tiles separated by spaces::

    You are at row 0, column 0.
    P F F F
    F H F H
    F F F H
    H F F G

Every later observation says what the move did, then shows the board again.

## Action grammar
A string. One move: ``Left``, ``Down``, ``Right`` or ``Up`` in any case, its first letter
(``L D R U``), or Gymnasium's digit (``0`` Left, ``1`` Down, ``2`` Right, ``3`` Up). In a longer
reply put the move in backticks (the last backtick span that is a move counts:
``I go `Down` .``); without backticks the whole reply must be the move, optionally as
``Action: Down`` / ``Move: down`` and wrapped in quotes, ``**`` or a full stop. Text before a
closing ``</think>`` is ignored. Anything else is an invalid action: the player does not move,
the observation says why, ``info["action_valid"]`` is False and the turn counts.

## Reward
1.0 on reaching the goal, 0.0 otherwise; an invalid action gives ``-format_penalty``
(default 0.0).

## Episode end
Terminated on the goal (``info["is_correct"] = True``) or a hole (``False``). Truncated after
``max_turns`` turns (default ``2 * size**2``, ``6 * size**2`` on slippery ice). Before its
first reset, an env made without ``max_turns`` reports the largest limit of its tasks in
``env.unwrapped.max_turns`` (128 for the shipped splits), which is what ``rllm-eval`` and
``rllm-train`` play by default; each reset then sets the lake's own.

## Arguments
``gym.make("rllm/FrozenLake-v0", tasks="shipped:train", size=None, p=None, is_slippery=None,
max_turns=None, format_penalty=0.0, column_map=None, render_mode=None)``

* ``tasks``: ``"shipped:train"`` (1,000 lakes), ``"shipped:test"`` (200 lakes, none of them in
  train), a JSONL/JSON/Parquet file, ``"registry:<name>"``, or a list of rows. A row has
  ``seed`` and optionally ``size`` (2-16), ``p`` (frozen-tile probability, 0.5-1),
  ``slippery`` and ``task_id``; or an explicit ``map`` (a list of strings over ``SFHG``, S at
  the top-left, G at the bottom-right, with a path). Maps from Gymnasium's
  ``generate_random_map`` always have a path from S to G.
* ``size``, ``p``, ``is_slippery``: when given, they override those fields of every task.
  Fields missing from both default to size 4, p 0.8, not slippery. The shipped splits are
  not slippery, sizes 3-8 and p in {0.7, 0.8, 0.9}.
* ``reset(options={"task": row})`` plays one explicit row.

``info`` holds ``task_id``, ``turn``, ``action_valid``, ``move`` (the move made), ``size`` and
``slippery`` at reset, and ``is_correct`` when the episode terminates.
``metadata["rllm.inline_safe"]`` is True: calls never block and may come from any thread.

## Solvers
``rllm_envs.frozenlake.solver`` has pure solvers (``shortest_path``, ``best_policy``) and
``python -m rllm_envs.frozenlake.scripted`` plays seeded episodes with them.

## Snapshots
``env.snapshot()`` / ``env.restore(snap)`` / ``env.fork(n)`` (and the same functions of
``rllm_envs.core.snapshots`` through ``gym.make``'s wrappers) capture the lake, the player's
position and the env's ``np_random`` state: after a restore the same moves slip the same way.
Snapshots pickle.

## Version history
* v0: first version.
* v0, snapshots: ``snapshot`` / ``restore`` / ``fork`` (same id: no change to the episodes).
* v0: ``max_turns`` is the largest limit of the tasks before the first reset (it was None);
  no change to the episodes.
"""

from rllm_envs.frozenlake.env import FrozenLakeEnv

__all__ = ["FrozenLakeEnv"]
