"""benchmarks/ray_scaleout.py runs and reports all three comparisons (timings not asserted)."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark
from tests.parts import require_module

require_module("ray", "the Ray benchmark needs ray (pip install 'rllm-agents[ray]')")


@pytest.mark.slow
def test_ray_scaleout_benchmark_reports_overhead_scaling_and_node_kill():
    result = run_benchmark("ray_scaleout.py", "--quick", timeout=400)
    out = result.stdout
    assert "1. overhead:" in out and "ms per step" in out
    assert "2 worker(s)" in out and "4 worker(s)" in out
    assert "3. node killed" in out and "0 lost, 0 duplicated" in out
