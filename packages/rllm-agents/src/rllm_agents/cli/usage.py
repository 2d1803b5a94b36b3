"""Bad command-line input as one line on stderr and exit status 2, for every rllm command.

A user who mistypes an env id, a split or a number should read what was wrong and what is
valid, not a traceback. Commands parse with :class:`CommandParser`, raise :class:`UsageError`
for what they check themselves, and end with :func:`report_usage_error`. The checks that more
than one command needs (env ids, numbers) live here too.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable
from typing import NoReturn

USAGE_EXIT_CODE = 2


class UsageError(ValueError):
    """Input the command cannot run with; the message says what is valid or what to do."""


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are :class:`UsageError` (one line) instead of usage text."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def one_line(text: str) -> str:
    """`text` with every run of whitespace, newlines included, as one space."""
    return " ".join(str(text).split())


def report_usage_error(prog: str, error: BaseException) -> int:
    """Print ``prog: error: <message>`` as one line on stderr; the exit status to return."""
    print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
    return USAGE_EXIT_CODE


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

    module_name, sep, plain_id = env_id.rpartition(":")
    if sep:
        try:
            importlib.import_module(module_name)
        except ImportError as error:
            raise UsageError(
                f"env id {env_id!r}: cannot import module {module_name!r}: {error}"
            ) from error
    if plain_id not in gym.registry:
        raise UsageError(f"{plain_id!r} is not a registered Gymnasium env; {_env_hint(plain_id)}")
    return plain_id


def _env_hint(plain_id: str) -> str:
    import gymnasium as gym
    import rllm_envs

    similar = difflib.get_close_matches(plain_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"similar ids: {', '.join(similar)}; " if similar else ""
    return hint + f"rllm ids: {', '.join(rllm_envs.ENV_IDS)}"
