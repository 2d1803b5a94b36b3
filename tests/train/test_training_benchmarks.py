"""The training benchmarks run end to end at a small size, on the tiny model, and report what
they promise (their timings are not asserted; the README has the figures)."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_runs import run_benchmark

pytestmark = pytest.mark.slow

# The smallest step the trainer takes: 2 tasks x 2 samples, 4 tokens each.
SMALL_STEP = ("rollout.tasks_per_step=2", "rollout.n=2", "rollout.max_response_tokens=4")


def test_trainer_overhead_compares_our_step_with_a_minimal_one(tmp_path):
    figures = tmp_path / "overhead.json"
    run_benchmark(
        "trainer_overhead.py", "--steps=2", "--repeats=1", "--before=none",
        f"--json={figures}", *SMALL_STEP, timeout=600,
    )  # fmt: skip
    report = json.loads(figures.read_text())
    summary = report["summary"]
    assert summary["model"] == "tiny" and summary["steps_measured"] == 1
    assert summary["ours_s_median"] > 0 and summary["minimal_s_median"] > 0
    # The hand-written step must make the same update as ours, or the ratio compares nothing.
    assert summary["update_cosine_min"] > 0.99
    assert len(report["steps"]) == 2


def test_tree_grpo_reports_both_sides_of_every_group(tmp_path):
    figures = tmp_path / "tree.json"
    result = run_benchmark(
        "tree_grpo.py", "--groups=2", "--k=2", "--reference=2", "--branch-turns=1",
        "--policies=noisy-expert", "--settings=4x4 solid", "--max-turns=3", f"--json={figures}",
        timeout=600,
    )  # fmt: skip
    assert "ratio tree@1/plain" in result.stdout
    [case] = json.loads(figures.read_text())["results"].values()
    assert set(case) == {"plain", "tree@1"}
    for side in case.values():
        assert 0.0 <= side["informative"] <= 1.0 and side["advantage_variance"] >= 0.0
    assert case["plain"]["branched"] == 0.0  # plain GRPO never branches


def test_async_training_runs_each_side_and_compares_them(tmp_path):
    png = tmp_path / "async.png"
    result = run_benchmark(
        "async_training.py", "--sides=sync,async", "--model=tiny", "--steps=2", f"--png={png}",
        *SMALL_STEP, timeout=600,
    )  # fmt: skip
    out = result.stdout
    assert "sync: 2 steps" in out and "async: 2 steps" in out
    [async_row] = [line for line in out.splitlines() if line.startswith("async ")]
    assert async_row.rstrip().endswith("x")  # samples/s as a ratio to the first side
    assert png.is_file() and png.stat().st_size > 0


def test_engine_replicas_runs_one_and_two_replicas_and_compares_their_steps():
    result = run_benchmark(
        "engine_replicas.py", "--replicas=1,2", "--model=tiny", "--steps=2", *SMALL_STEP,
        timeout=600,
    )  # fmt: skip
    out = result.stdout
    assert "1 replicas: 2 steps" in out and "2 replicas: 2 steps" in out
    [one] = [line for line in out.splitlines() if line.startswith("| 1 |")]
    [two] = [line for line in out.splitlines() if line.startswith("| 2 |")]
    assert one.endswith("| 1.00x |") and two.rstrip(" |").endswith("x")
    served = two.split(" | ")[-3].split("/")  # requests per step of each replica
    assert len(served) == 2 and all(float(count) > 0 for count in served)


def test_curriculum_runs_uniform_and_plr_on_the_same_pool(tmp_path):
    result = run_benchmark(
        "curriculum.py", "--family=arithmetic", "--model=tiny", "--steps=2", "--sizes=1,2",
        "--per-size=2", "--tasks-per-step=2", "--n=2", f"--output={tmp_path}",
        "rollout.max_response_tokens=4", timeout=600,
    )  # fmt: skip
    out = result.stdout
    for kind in ("uniform", "plr"):
        rows = [
            json.loads(line)
            for line in (tmp_path / kind / "metrics.jsonl").read_text().splitlines()
        ]
        assert [row["step"] for row in rows] == [1, 2]
        assert any(line.startswith(f"{kind} | ") for line in out.splitlines())
    assert (tmp_path / "curriculum.png").is_file()


def test_main_job_compares_held_out_gain_per_minute_side_by_side(tmp_path):
    result = run_benchmark(
        "main_job.py", "--sides=sync-local-full,sync-local-lora", "--model=tiny", "--steps=1",
        f"--keep={tmp_path}", *SMALL_STEP, timeout=600,
    )  # fmt: skip
    out = result.stdout
    assert "| side | seed | steps | held-out before | held-out after | gain |" in out
    for side in ("sync-local-full", "sync-local-lora"):
        assert f"| {side} | 0 | 1 |" in out
        # Each side's run folder holds both validations' held-out episodes.
        assert (tmp_path / f"{side}-0" / "validation" / "step_0001.jsonl").is_file()
    assert "gain/min against the first side" in out
