"""The engine benchmarks run end to end (their numbers are reported, not asserted)."""

from __future__ import annotations

import json

from tests.benchmark_runs import benchmark_module


def test_agent_throughput_harness_runs(capsys):
    report = benchmark_module("engine_throughput").main(
        ["--skip-local", "--parallel", "1,8", "--latency", "0.1", "--turns", "2", "--rounds", "1",
         "--episodes-per-agent", "2", "--clients", "aiohttp+uvloop,aiohttp",
         "--eval-parallel", "8", "--eval-latency", "0.2", "--eval-rounds", "1"]
    )  # fmt: skip
    runs = report["agents"]
    assert [(r["client"], r["parallel"]) for r in runs] == [
        ("aiohttp+uvloop", 1), ("aiohttp", 1), ("aiohttp+uvloop", 8), ("aiohttp", 8),
    ]  # fmt: skip
    assert [r["episodes"] for r in runs] == [2, 2, 16, 16]  # 2 episodes per agent, none lost
    for run in runs:
        # Nothing can beat the server's latency; far below it would mean the harness is broken.
        assert 10 < run["percent_of_ideal"] <= 101
        assert run["server_max_in_flight"] == run["parallel"]  # the agents waited concurrently
    # rllm-eval as a command: 8 agents, 2 one-turn episodes each, timed four ways,
    # and plain aiohttp sending the same requests.
    (eval_run,) = report["eval"]
    assert eval_run["episodes"] == 16 and eval_run["ideal_s"] == 0.4
    assert eval_run["requests_s"] <= eval_run["eval_s"] <= eval_run["process_s"]
    assert 0.4 <= eval_run["requests_s"]  # two rounds of the server's latency at least
    # Beside it, the interpreter importing only the third-party libraries: part of the process.
    assert 0 < eval_run["floor_s"] < eval_run["process_s"]
    assert abs(eval_run["own_s"] - (eval_run["process_s"] - eval_run["floor_s"])) < 0.002
    assert 0.4 <= eval_run["plain_s"]  # plain aiohttp cannot beat the server's latency either
    out = capsys.readouterr().out
    assert "% ideal" in out and "rllm-eval end to end" in out


def test_engine_sides_benchmark_runs_in_tiny_mode(tmp_path, capsys):
    """benchmarks/engines.py: each side in a child process, every concurrency measured, the
    weight sync timed, the table printed (the tiny model; local and process engines)."""
    results = benchmark_module("engines").main(
        ["--model", "tiny", "--sides", "local,process", "--concurrency", "1,4",
         "--max-tokens", "4", "--json", str(tmp_path / "engines.json")]
    )  # fmt: skip
    assert [result["side"] for result in results] == ["local", "process"]
    for result in results:
        assert "error" not in result, result
        assert [row["n"] for row in result["rows"]] == [1, 4]
        for row in result["rows"]:
            assert 0 < row["tokens"] <= row["n"] * 4
            assert row["tokens_per_s"] > 0 and row["ttft_s"] > 0
        assert result["sync_s"] > 0
    assert json.loads((tmp_path / "engines.json").read_text()) == results
    out = capsys.readouterr().out
    assert "peak:" in out and "first token" in out
