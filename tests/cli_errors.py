"""Checks shared by the CLI error tests: bad input ends in one line on stderr and status 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

USAGE_EXIT_CODE = 2


def installed_command(name: str) -> str:
    """The console script `name` installed next to this Python (as a user runs it)."""
    command = shutil.which(name, path=str(Path(sys.executable).parent))
    assert command, f"{name} is not installed next to {sys.executable}"
    return command


def run_command(
    name: str, *args: str, timeout: float = 120, cwd: str | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [installed_command(name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def assert_one_line_error(code: int, stderr: str, prog: str, *expected: str) -> str:
    """Status 2, and stderr is a single ``prog: ...`` line holding each `expected` text."""
    assert code == USAGE_EXIT_CODE, f"exit status {code}, stderr: {stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    line = lines[0]
    assert line.startswith(f"{prog}: "), line
    for text in expected:
        assert text in line, f"{text!r} not in: {line}"
    return line
