"""Running a script of `benchmarks/` from a test, as a user would (its timings are not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `benchmarks/<script>` with the test's interpreter; fail with its output if it fails."""
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result
