"""The rllm/SWE-v0 benchmarks run, at small size (their timings are not asserted)."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark
from tests.envs.swe_support import require_images, shipped_rows

pytestmark = pytest.mark.slow


def test_latency_benchmark_reports_every_figure():
    require_images({row["image_name"] for row in shipped_rows("test")})
    args = ["--episodes", "2", "--steps", "6", "--envs", "2", "--episodes-per-env", "1"]
    output = run_benchmark("swe_latency.py", *args, timeout=600).stdout
    for figure in ("reset, cold", "reset, warm pool", "step, bash command", "evaluation"):
        assert figure in output
    assert "2 envs in parallel: 2 gold episodes" in output and "0 failures" in output


def test_integrity_benchmark_plays_the_agents_over_the_split():
    require_images({row["image_name"] for row in shipped_rows("test")})
    args = ["--limit", "1", "--agents", "gold,noop,delete_tests", "--envs", "1"]
    output = run_benchmark("swe_integrity.py", *args, timeout=600).stdout
    assert "all as expected" in output and "gold                            1          1" in output
