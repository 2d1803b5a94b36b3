"""The engine benchmark runs end to end (its numbers are reported, not asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARK = Path(__file__).parents[3] / "benchmarks" / "engine_throughput.py"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("engine_throughput", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_agent_throughput_harness_runs(capsys):
    report = _load_benchmark().main(
        [
            "--skip-local",
            "--parallel",
            "1,8",
            "--latency",
            "0.1",
            "--turns",
            "2",
            "--rounds",
            "1",
            "--episodes-per-agent",
            "2",
        ]
    )
    runs = report["agents"]
    assert [r["parallel"] for r in runs] == [1, 8]
    assert [r["episodes"] for r in runs] == [2, 16]  # 2 episodes per agent, none lost
    for run in runs:
        # Nothing can beat the server's latency; far below it would mean the harness is broken.
        assert 10 < run["percent_of_ideal"] <= 101
    assert runs[1]["server_max_in_flight"] == 8  # the 8 agents really waited concurrently
    assert "% ideal" in capsys.readouterr().out
