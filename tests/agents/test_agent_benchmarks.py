"""The episode-record, judge and compaction benchmarks run end to end at a small size and report
what they promise (their timings are not asserted)."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_runs import run_benchmark
from tests.parts import require_module

pytestmark = pytest.mark.slow


def test_episode_records_times_every_mode_and_both_formats():
    result = run_benchmark(
        "episode_records.py", "--parallel=4", "--per-agent=1", "--turns=2", "--latency=0.05",
        "--rounds=1", timeout=600,
    )  # fmt: skip
    report = json.loads(result.stdout.strip().splitlines()[-1])
    cost, formats = report["cost"], report["format"]
    assert cost["episodes"] == 4 and set(cost["median_s"]) == {"none", "plain", "recorded"}
    # The full record holds more than the plain log: the env's record rides along.
    assert cost["episodes_file_bytes"]["recorded"] > cost["episodes_file_bytes"]["plain"] > 0
    assert formats["episodes"] == 4
    for kind in ("jsonl", "parquet"):
        assert formats[kind]["bytes"] > 0 and formats[kind]["hf_load_s"] > 0


def test_judge_cost_judges_groups_three_ways():
    require_module("llama_cpp", "llama-cpp-python comes with rllm-agents[smollm2]")
    result = run_benchmark(
        "judge_cost.py", "--groups=1", "--n=2", "--slots=1", "--reply-tokens=8",
        "--judge-tokens=24", timeout=600,
    )  # fmt: skip
    out = result.stdout
    for way in ("group ", "group, reversed", "pointwise"):
        assert any(line.startswith(way) and "per group" in line for line in out.splitlines()), out
    assert "groups whose scores rise with the position:" in out and "of 1" in out
    assert "replies scored the same in both orders:" in out and "of 2" in out


def test_compaction_compares_every_policy_on_the_same_episodes(tmp_path):
    figures = tmp_path / "rows.json"
    result = run_benchmark(
        "compaction.py", "--model=tiny", "--episodes=1", "--max-turns=6", "--budget=500",
        "--max-tokens=8", "--summary-tokens=16", f"--json={figures}", timeout=300,
    )  # fmt: skip
    rows = {row["policy"]: row for row in json.loads(figures.read_text())}
    assert list(rows) == ["none", "last_turns", "drop_tool_outputs", "summarize", "summarize_with"]
    assert rows["none"]["ended"] == {"prompt_too_long": 1} and rows["none"]["compactions"] == 0
    for policy in ("last_turns", "drop_tool_outputs", "summarize", "summarize_with"):
        row = rows[policy]
        assert row["compactions"] >= 1 and row["sequences"] >= 2, row
        assert row["turns"] > rows["none"]["turns"]
        assert row["sequence_tokens"] > 0 and row["wall_s"] > 0
    assert rows["summarize"]["summaries_trained"] == rows["summarize"]["summaries"] >= 1
    assert rows["summarize_with"]["summaries_trained"] == 0 < rows["summarize_with"]["summaries"]
    for policy in rows:
        assert any(line.split()[:1] == [policy] for line in result.stdout.splitlines()), policy
