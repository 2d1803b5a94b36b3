"""benchmarks/mcp_overhead.py runs and reports its figures (timings are not asserted: they
depend on the machine), with one shared server and none left behind."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_runs import run_benchmark
from tests.parts import require_module

require_module("mcp", "rllm/MCP-v0 needs the mcp extra")


@pytest.mark.slow
def test_mcp_overhead_benchmark_reports_latency_ratio_and_shared_servers():
    result = run_benchmark(
        "mcp_overhead.py",
        "--calls=10",
        "--rounds=1",
        "--envs=4",
        "--steps-per-env=2",
        "--json",
    )
    assert "ratio env/raw:" in result.stdout
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["server_processes"] == 1  # four envs, one server
    assert figures["calls"] == 8 and figures["failures"] == 0
    assert figures["leftover_servers"] == 0
