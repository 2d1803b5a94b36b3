"""``rllm/OpenEnded-v0``: answer an open-ended prompt; no grader, so the reward is always 0.

Many tasks have no programmatic check: "write a greeting", "describe a tree in autumn". This env
plays such prompts and leaves the reward to something outside it: a judge model
(``rllm_agents.rewards.JudgeReward``, or ``rllm-train``'s ``reward.judge`` section; see
docs/agents/judge.md). Played alone it is a smoke test of a reward that never moves. Needs no
extra.

## Observation
The prompt, as written in the task row (``"Name a fruit that is yellow."``). After the reply:
``"Reply received. The episode has ended."`` (or, for an empty reply, that it was empty).

## Action grammar
Any text: the whole reply is the answer. An empty (or whitespace-only) reply is an invalid
action (``info["action_valid"] = False``).

## Reward
Always 0.0: the env grades nothing. ``info["graded"]`` is False to say so; there is no
``is_correct``.

## Episode end
One turn: the episode terminates after the first reply.

## Arguments
``gym.make("rllm/OpenEnded-v0", tasks="shipped:prompts", split="train", column_map=None,
render_mode=None)``. ``tasks``: rows with a ``prompt`` column (and optionally ``task_id``):
``"shipped:prompts"`` (32 short everyday instructions), a JSONL/JSON/Parquet file,
``"hf:<name>"``, ``"registry:<name>"`` or a list of rows; ``column_map`` renames a source's
columns (``{"instruction": "prompt"}``). ``reset(seed=s)`` draws a row with the seed;
``reset(options={"task": {"prompt": "..."}})`` plays one explicit prompt.
``metadata["rllm.inline_safe"]`` is True: calls never block and may come from any thread.

## Snapshots and async
``snapshot`` / ``restore`` / ``fork`` (``rllm_envs.core.snapshots``): the base snapshot (task,
turn, whether the episode is over) is the whole episode. ``areset`` / ``astep``: the thread
fallback of ``rllm_envs.core.async_env`` (the same results as ``reset`` / ``step``).

## Version history
* v0: first version.
"""

from rllm_envs.openended.env import ENV_ID, SHIPPED_SETS, OpenEndedEnv

__all__ = ["ENV_ID", "SHIPPED_SETS", "OpenEndedEnv"]
