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
