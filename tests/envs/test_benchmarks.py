"""The benchmarks run and report what they promise (their timings are not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_env_overhead_benchmark_reports_the_ratio_and_the_hook_cost():
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "env_overhead.py"),
            "--steps=300",
            "--repeats=1",
            "--grading-seconds=0.2",
            "--startup-runs=1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "ratio text/raw:" in result.stdout
    assert "Math grading:" in result.stdout
    assert "hook cost on 'import gymnasium':" in result.stdout
