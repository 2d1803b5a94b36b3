"""benchmarks/gateway_overhead.py runs and reports what it promises (timings not asserted)."""

from __future__ import annotations

from tests.benchmark_runs import run_benchmark


def test_gateway_overhead_benchmark_reports_both_parts():
    result = run_benchmark(
        "gateway_overhead.py",
        "--conversations=2",
        "--turns=3",
        "--rounds=1",
        "--sessions=8",
        "--session-turns=2",
        "--latency=0.05",
        "--session-rounds=1",
        "--skip-tokens",  # the token route needs transformers in two processes: slow to start
    )
    assert "overhead of messages gateway:" in result.stdout
    assert "overhead of messages gateway x2:" in result.stdout  # served by two processes
    assert "8 sessions at once (in a child process)" in result.stdout
    assert "messages gateway x2" in result.stdout
