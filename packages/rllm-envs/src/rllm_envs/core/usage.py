"""Bad command-line input as one line on stderr and exit status 2, for every rllm command.

A user who mistypes an option should read what was wrong and what is valid, not a traceback.
Commands parse with :class:`CommandParser`, raise :class:`UsageError` for what they check
themselves, and end with :func:`report_usage_error`. This lives in the lowest package so that
``rllm-envs``, ``rllm-eval`` and ``rllm-train`` all answer bad input the same way.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

USAGE_EXIT_CODE = 2


class UsageError(ValueError):
    """Input the command cannot run with; the message says what is valid or what to do."""


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are :class:`UsageError` (one line) instead of usage text."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def one_line(text: object) -> str:
    """`text` with every run of whitespace, newlines included, as one space."""
    return " ".join(str(text).split())


def report_usage_error(prog: str, error: BaseException) -> int:
    """Print ``prog: error: <message>`` as one line on stderr; the exit status to return."""
    print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
    return USAGE_EXIT_CODE


def json_object_argument(text: str, option: str) -> dict:
    """The JSON object an option such as ``--env-kwargs`` gives, or a UsageError saying why
    it is not one."""
    import json

    try:
        value = json.loads(text)
    except ValueError as error:
        raise UsageError(f"{option} is not valid JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option} must be a JSON object, e.g. '{{\"max_turns\": 3}}'")
    return value


def check_env_id(env_id: str, option: str = "--env") -> str:
    """The plain registered id of `env_id` (importing its module first), or a UsageError
    naming similar ids and how to name an env of the user's own module (with `option`).

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
        raise UsageError(
            f"{plain_id!r} is not a registered Gymnasium env; {_env_hint(plain_id, option)}"
        )
    return plain_id


def _env_hint(plain_id: str, option: str) -> str:
    import difflib

    import gymnasium as gym

    import rllm_envs

    similar = difflib.get_close_matches(plain_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"similar ids: {', '.join(similar)}; " if similar else ""
    hint += f"rllm ids: {', '.join(rllm_envs.ENV_IDS)}"
    # An id registered by the user's own module is found once that module is named.
    return hint + f"; an env your module registers: {option} your_module:{plain_id}"
