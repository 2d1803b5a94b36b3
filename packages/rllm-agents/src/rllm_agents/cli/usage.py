"""Bad command-line input as one line on stderr and exit status 2, for every rllm command.

A user who mistypes an env id, a split or a number should read what was wrong and what is
valid, not a traceback. Commands parse with :class:`CommandParser`, raise :class:`UsageError`
for what they check themselves, and end with :func:`report_usage_error`. The checks that more
than one command needs (numbers, text envs) live here too; the env-id check is rllm-envs'.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

# The parser, the error and the one-line report are shared with rllm-envs' own command.
from rllm_envs.core.usage import (
    USAGE_EXIT_CODE,
    CommandParser,
    UsageError,
    check_env_id,
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


# ---- env ids ----------------------------------------------------------------------------


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
