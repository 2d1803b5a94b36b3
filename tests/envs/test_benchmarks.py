"""The benchmarks run and report what they promise (their timings are not asserted)."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_runs import run_benchmark
from tests.envs.swe_support import require_images, shipped_rows
from tests.envs.web_support import require_web
from tests.sandbox.conftest import require_backend


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


@pytest.mark.slow
def test_env_snapshots_times_the_web_envs_snapshot_and_replay():
    require_web()
    result = run_benchmark("env_snapshots.py", "--repeats=1", "--sections=web")
    for actions in (0, 2, 6):
        assert f"after {actions} actions: snapshot p50" in result.stdout


@pytest.mark.slow
def test_env_snapshots_times_both_swe_capture_methods_and_the_code_env():
    require_images({shipped_row(repo)["image_name"] for repo in ("toolz", "boltons")})
    require_backend("docker")
    result = run_benchmark(
        "env_snapshots.py", "--repeats=1", "--blob-mb", "--sections=swe,code", timeout=600
    )
    out = result.stdout
    for project in ("toolz", "boltons"):
        assert any(line.startswith(project) and "auto picks" in line for line in out.splitlines())
    assert "rllm/Code-v0 (docker sandbox)" in out and "in-Python snapshot p50" in out


@pytest.mark.slow
def test_sandbox_throughput_compares_bwrap_with_cold_and_warm_docker(tmp_path):
    require_backend("bwrap")
    require_backend("docker")
    figures = tmp_path / "sandbox.json"
    run_benchmark("sandbox_throughput.py", "--runs=3", "--rounds=1", f"--json={figures}")
    report = json.loads(figures.read_text())
    assert [row["mode"] for row in report["results"]] == ["bwrap", "docker_cold", "docker_warm"]
    assert all(row["runs"] == 3 and row["executions_per_second"] > 0 for row in report["results"])
    assert set(report["ratios"]) >= {"bwrap_vs_docker_cold", "warm_pool_vs_docker_cold"}


def shipped_row(repo: str) -> dict:
    """The first shipped SWE train row of `repo`, the one env_snapshots.py plays."""
    return next(row for row in shipped_rows("train") if row["repo"] == repo)
