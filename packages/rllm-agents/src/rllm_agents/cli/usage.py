"""Bad command-line input as one line on stderr and exit status 2, for every rllm command.

A user who mistypes an env id, a split or a number should read what was wrong and what is
valid, not a traceback. Commands parse with :class:`CommandParser`, raise :class:`UsageError`
for what they check themselves, and end with :func:`report_usage_error`. The checks that more
than one command needs (env ids, numbers) live here too.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable

# The parser, the error and the one-line report are shared with rllm-envs' own command.
from rllm_envs.core.usage import (
    USAGE_EXIT_CODE,
    CommandParser,
    UsageError,
    one_line,
    report_usage_error,
)

__all__ = [
    "USAGE_EXIT_CODE",
    "CommandParser",
    "UsageError",
    "check_env_id",
    "check_text_env",
    "non_negative_float",
    "one_line",
    "positive_float",
    "positive_int",
    "probability",
    "report_usage_error",
]


# ---- numbers (argparse ``type=`` functions: a ValueError names the argument and the value) ----


def _number(parse: Callable[[str], float], accept: Callable[[float], bool], wanted: str):
    def convert(text: str) -> float:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value

    convert.__name__ = wanted  # argparse names the type in some of its own messages
    return convert


positive_int = _number(int, lambda value: value > 0, "an integer of at least 1")
positive_float = _number(float, lambda value: value > 0, "a number greater than 0")
non_negative_float = _number(float, lambda value: value >= 0, "a number of at least 0")
probability = _number(float, lambda value: 0 < value <= 1, "a number in (0, 1]")


# ---- env ids -------------------------------------------------------------------------------


def check_env_id(env_id: str) -> str:
    """The plain registered id of `env_id` (importing its module first), or a UsageError.

    ``"pkg.module:ns/Name-vN"`` imports ``pkg.module`` first (where a third party registers its
    env), exactly as ``gym.make`` does.
    """
    import gymnasium as gym
    import rllm_envs  # noqa: F401  (registers the rllm/ ids)
    from rllm_envs.core.loading import LoadError, plain_env_id

    try:
        plain_id = plain_env_id(env_id)
    except LoadError as error:
        raise UsageError(str(error)) from error
    if plain_id not in gym.registry:
        raise UsageError(f"{plain_id!r} is not a registered Gymnasium env; {_env_hint(plain_id)}")
    return plain_id


def check_text_env(env, env_id: str) -> None:
    """A UsageError unless `env` takes text actions: an agent's reply is its action, so an env
    of numbers or arrays would fail every episode on the model's words."""
    import gymnasium as gym

    space = env.action_space
    if isinstance(space, gym.spaces.Text):
        return
    plain_id = env_id.rpartition(":")[2]
    raise UsageError(
        f"{plain_id!r} takes {type(space).__name__} actions, not text, so a model's reply "
        f"cannot be its action; play it in text through rllm/GymText-v0 "
        f'(--env rllm/GymText-v0 --env-kwargs \'{{"env_id": "{plain_id}"}}\', '
        f"or env.id=rllm/GymText-v0 env.kwargs.env_id={plain_id} for rllm-train)"
    )


def _env_hint(plain_id: str) -> str:
    import gymnasium as gym
    import rllm_envs

    similar = difflib.get_close_matches(plain_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"similar ids: {', '.join(similar)}; " if similar else ""
    hint += f"rllm ids: {', '.join(rllm_envs.ENV_IDS)}"
    # An id registered by the user's own module is found once that module is named.
    return hint + f"; an env your module registers: --env your_module:{plain_id}"
