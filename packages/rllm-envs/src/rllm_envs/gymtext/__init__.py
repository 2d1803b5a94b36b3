"""``rllm/GymText-v0``: any Gymnasium environment, observed and steered in text.

``gym.make("rllm/GymText-v0", env_id="CartPole-v1", **inner_kwargs)`` makes the inner env with
``gym.make(env_id, **inner_kwargs)`` (its own time limit included) and wraps it: the agent
reads observations as text and writes actions as text. Rewards and episode ends are the inner
env's.

## Observation
Text. The first observation names the env, describes its observation space and its action
space with an example action, then shows the inner observation; every later one shows the
reward and the new observation::

    You are acting in the Gymnasium environment CartPole-v1.
    Observations: 4 numbers (shape (4,)), between [-4.8, -inf, -0.4189, -inf] and [...]
    Actions: one integer from 0 to 1. Answer with the action alone or inside backticks, e.g. `0`.

    Observation: [ 0.0273, -0.0061,  0.0359,  0.0197]

Box, Discrete, MultiDiscrete, MultiBinary and Text values are written as numbers, arrays and
JSON strings (floats to 4 decimals); Dict and Tuple spaces nest; any other space is shown as
Python prints its values. Long observations (e.g. images) are clipped to the observation
space's bound.

## Action grammar
The action alone, or inside backticks (the last backtick span counts), optionally prefixed
with ``Action:``; text before a closing ``</think>`` is ignored.

* Discrete: one integer, e.g. ``1``.
* Box (bounded or not): exactly as many numbers as the shape holds, separated by spaces, commas
  or brackets, e.g. ``[0.5, -1]``; each within the bounds, finite; integer Boxes take integers.
* MultiDiscrete / MultiBinary: as many integers as the space holds, in range / 0 or 1.
* Text: the text itself (its length and characters must fit the inner space).

Any other reply is an invalid action: the inner env is not stepped (so an unreadable reply
never turns into some default action), the observation says why and repeats the grammar,
``info["action_valid"]`` is False, the reward is ``-format_penalty`` (default 0.0) and the turn
counts.

## Reward and episode end
The inner env's reward, ``terminated`` and ``truncated`` (its ``TimeLimit`` included).
``max_turns`` also truncates; it defaults to twice the inner env's ``max_episode_steps``
(room for invalid replies) or 1000 when it has none.

## Arguments
``gym.make("rllm/GymText-v0", env_id="CartPole-v1", tasks=None, max_turns=None,
format_penalty=0.0, description="", show_ansi=False, render_mode=None, **inner_kwargs)``

* ``env_id``: any registered Gymnasium id whose action space is Discrete, MultiDiscrete,
  MultiBinary, Box or Text.
* ``tasks``: rows with a ``seed`` (and optional ``options``) for the inner env's reset; by
  default the seeds 0-999, so ``reset(seed=s)`` picks one of them and the same seed gives the
  same episode. ``reset(options={"task": {"seed": 7}})`` plays one explicit seed.
* ``description``: text put first in the first observation (say what the task is about).
* ``show_ansi``: also show the inner env's ``"ansi"`` rendering after every observation
  (e.g. the map of Taxi or FrozenLake, without terminal colour codes); an env without that
  render mode is an error.
* ``**inner_kwargs``: passed to the inner ``gym.make`` (e.g. ``max_episode_steps``,
  ``continuous=True``).

``info`` holds ``task_id``, ``turn``, ``action_valid``, ``action`` (the parsed action as plain
Python values) and ``inner_info`` (the inner env's info).

## Snapshots
``snapshot`` / ``restore`` / ``fork`` (``rllm_envs.core.snapshots``) copy the inner env whole
(``copy.deepcopy``: its wrappers, its own ``np_random``, its dynamics' state), so they work for
the inner envs that plain Python and numpy hold - classic control, toy text, most custom envs.
An inner env that renders to a window or holds something that cannot be copied (a socket to a
simulator, a native handle) raises ``SnapshotUnsupported`` saying so.

## Version history
* v0: first version.
* v0, snapshots: ``snapshot`` / ``restore`` / ``fork`` (same id: no change to the episodes).
"""

from rllm_envs.gymtext.env import GymTextEnv

__all__ = ["GymTextEnv"]
