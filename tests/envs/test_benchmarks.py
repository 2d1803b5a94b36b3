"""The benchmarks run and report what they promise (their timings are not asserted)."""

from __future__ import annotations

from tests.benchmark_runs import run_benchmark


def test_env_overhead_benchmark_reports_the_ratio_and_the_hook_cost():
    result = run_benchmark(
        "env_overhead.py",
        "--steps=300",
        "--repeats=1",
        "--grading-seconds=0.2",
        "--startup-runs=1",
    )
    assert "ratio text/raw:" in result.stdout
    assert "Math grading:" in result.stdout
    assert "hook cost on 'import gymnasium':" in result.stdout
