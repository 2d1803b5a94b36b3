"""The two-node Ray cluster on one machine (scripts/ray_local_cluster.sh) and the native
trainer's Ray env workers on it: spread over both nodes, and a run that loses its worker node.

One cluster serves the module (``local_ray_cluster``); its stop, when the module ends,
fails if any process of the cluster is left behind. One training run shows both: its env
workers start on both nodes, then "worker1" is killed under it.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.parts import require_module
from tests.processes import alive
from tests.train.local_cluster import REPO_ROOT, SCRIPT

require_module("ray", "the local Ray cluster runs Ray: pip install 'rllm-agents[ray]'")

pytestmark = pytest.mark.slow

EPISODES_PER_STEP = 4  # rollout.tasks_per_step=2 x rollout.n=2
RUN_TIMEOUT_S = 300
STEPS = 4


def test_the_script_starts_two_nodes_with_their_own_resources(local_ray_cluster):
    nodes = local_ray_cluster.status()
    assert set(nodes) == {"head", "worker1"}
    assert nodes["head"]["node_id"] != nodes["worker1"]["node_id"]
    for name, node in nodes.items():
        assert node["alive"]
        # Each node names itself with a resource of its own and has its own logical GPU.
        custom = {key for key in node["resources"] if key.startswith("rllm_node_")}
        assert custom == {f"rllm_node_{name}"}
        assert node["resources"]["GPU"] == 1 and node["resources"]["CPU"] == 8
    assert local_ray_cluster.node_ids() == {name: node["node_id"] for name, node in nodes.items()}
    # Every node runs processes of its own (its raylet at least).
    assert local_ray_cluster.processes("head") and local_ray_cluster.processes("worker1")


def test_the_script_keeps_the_executors_fast_node_death():
    """The head's health check is the executor's FAST_NODE_DEATH, so a lost node counts as
    dead in seconds."""
    from rllm_agents.execution.ray_executor import FAST_NODE_DEATH

    line = re.search(r"^FAST_NODE_DEATH='(.*)'$", SCRIPT.read_text(), re.MULTILINE)
    assert line and json.loads(line.group(1)) == FAST_NODE_DEATH


@pytest.fixture(scope="module")
def run_that_lost_a_node(local_ray_cluster, tiny_model, tmp_path_factory) -> dict:
    """A native run on the cluster's Ray env workers whose worker node is killed after step 1
    (three steps left to notice it and carry on): where its workers ran, and what it trained."""
    nodes = local_ray_cluster.node_ids()
    since = time.time()
    output = tmp_path_factory.mktemp("native") / "run"
    run = start_training(local_ray_cluster.address, tiny_model, output, steps=STEPS)
    try:
        wait_for_first_step(run, output)
        rows_at_kill = len(metric_rows(output))
        first_workers = local_ray_cluster.actors("EpisodeWorker", since=since)
        doomed = local_ray_cluster.processes("worker1")
        local_ray_cluster.kill_worker(1)
    except BaseException:
        stop_run(run)
        raise
    node_gone = doomed and not [pid for pid in doomed if alive(pid)]
    finish(run, output)
    return {"nodes": nodes, "output": output, "rows_at_kill": rows_at_kill,
            "first_workers": first_workers, "node_gone": node_gone,
            "workers": local_ray_cluster.actors("EpisodeWorker", since=since)}  # fmt: skip


def test_native_ray_env_workers_spread_over_both_nodes(run_that_lost_a_node):
    run = run_that_lost_a_node
    workers = run["first_workers"]
    assert len(workers) == 2  # rollout.ray_workers=2
    assert {w["node_id"] for w in workers} == set(run["nodes"].values())
    assert all(w["state"] == "DEAD" for w in run["workers"])  # ended with the run


def test_a_native_run_survives_losing_its_worker_node(run_that_lost_a_node):
    run = run_that_lost_a_node
    assert run["node_gone"]  # the whole node went
    assert run["rows_at_kill"] < STEPS  # killed mid-run
    assert_trained(run["output"], steps=STEPS)
    # The run had a worker on the node, and lost it with the node.
    lost = run["nodes"]["worker1"]
    on_lost = [w for w in run["workers"] if w["node_id"] == lost]
    assert on_lost and all(w["death_reason"] == "NODE_DIED" for w in on_lost), run["workers"]


# ---- a training run -------------------------------------------------------------------------
def start_training(address: str, model: str, output: Path, steps: int) -> subprocess.Popen:
    """rllm-train on the cluster's Ray env workers, as tests/agents/test_ray_executor.py's
    in-process run: the trainer's own model answers episodes played on two workers."""
    argv = [
        sys.executable, "-m", "rllm_train.cli",
        "--env=rllm/FrozenLake-v0", f"--model={model}", f"--output={output}",
        f"--steps={steps}", "--no-progress",
        "--executor=ray", f"--ray-address={address}",
        "rollout.dispatch=async", "rollout.ray_workers=2",
        "rollout.tasks_per_step=2", "rollout.n=2", "rollout.max_turns=2",
        "rollout.max_response_tokens=6",
        "trainer.save_every=0", "trainer.validate_held_out=false", "model.lora_rank=0",
    ]  # fmt: skip
    output.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with (output.parent / "train.log").open("w") as log:  # the run holds its own copy
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def finish(run: subprocess.Popen, output: Path) -> None:
    try:
        code = run.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_run(run)
        pytest.fail(f"rllm-train did not finish within {RUN_TIMEOUT_S}s: {log_tail(output)}")
    assert code == 0, log_tail(output)


def stop_run(run: subprocess.Popen) -> None:
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()


def wait_for_first_step(run: subprocess.Popen, output: Path) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not metric_rows(output):
        if run.poll() is not None:
            pytest.fail(f"rllm-train ended ({run.returncode}) before step 1: {log_tail(output)}")
        if time.monotonic() > deadline:
            pytest.fail(f"no step within {RUN_TIMEOUT_S}s: {log_tail(output)}")
        time.sleep(0.1)


def metric_rows(output: Path) -> list[dict]:
    try:
        lines = (output / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # the last line, half written
            break
    return rows


def assert_trained(output: Path, steps: int) -> None:
    rows = metric_rows(output)
    assert [row["step"] for row in rows] == list(range(1, steps + 1))
    for row in rows:
        assert row["episodes"] == EPISODES_PER_STEP and row["failed_episodes"] == 0, row
        assert math.isfinite(row["loss"])


def log_tail(output: Path) -> str:
    return (output.parent / "train.log").read_text(errors="replace")[-3000:]
