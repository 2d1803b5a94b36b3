"""verl past one process and one node, on this machine: ``rllm-train --backend verl`` on a
2-node Ray cluster (scripts/ray_local_cluster.sh: a head and a worker node, one logical GPU
each, so one training or rollout process each in rllm's CPU mode).

* verl's one-step-off trainer: its actor and its rollout land on different nodes.
* verl's synchronous trainer with ``verl.nnodes=2``: 2 training processes, one per node (FSDP2
  over gloo), training PPO with a KL loss: a LoRA actor whose base weights are the reference,
  and a critic, all sharded over both; and 2 rollout replicas, each beside its training
  process. Both
  replicas serve turns and both get every weight sync. Then the worker node is killed after
  step 2 is saved: the run stops within seconds with one line saying so, and ``--resume`` on
  the head alone (1 training process) regathers the checkpoint the 2 processes saved and
  trains the remaining steps.

That 2 processes compute the same update as 1 is tests/train/test_verl_sharded_update.py;
that regathering moves every number exactly, tests/train/test_verl_reshard.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import pytest

from tests.parts import require_module
from tests.train.test_verl_training import (
    PROB_GAP_TOLERANCE,
    REPO_ROOT,
    command_and_env,
    trained_rows,
)

pytestmark = pytest.mark.slow

TRAINING_WORKER = "create_colocated_worker_cls.<locals>.WorkerDict"  # verl's training actors
ROLLOUT_SERVER = "LocalEngineServer"  # rllm's rollout server, one per replica
# PPO: a critic beside the actor; a KL loss: the reference (a LoRA actor's base weights).
PPO_LORA_KL = ("--algorithm", "ppo", "algorithm.kl_coef=0.01", "model.lora_rank=8",
               "model.lora_alpha=16")  # fmt: skip
TWO_NODES = ("verl.nnodes=2", "verl.n_gpus_per_node=1")
HEAD_ONLY = ("verl.nnodes=1", "verl.n_gpus_per_node=1")
# A step takes a few seconds: the run has steps left to lose when the node is killed.
STEPS = ("--steps", "6", "trainer.save_every=1")


@pytest.fixture(scope="module")
def cluster():
    require_module("ray", "the verl backend's trainer runs on Ray: pip install 'rllm-train[verl]'")
    from tests.train.local_cluster import LocalRayCluster

    # Logical CPUs are reservations only: verl asks for several per process and controller.
    with LocalRayCluster(workers=1, gpus_per_node=1, cpus_per_node=16) as started:
        yield started


def on_cluster(cluster, output: Path, *extra: str) -> tuple[list[str], dict[str, str]]:
    return command_and_env(output, extra, cluster.address)


def nodes_of(cluster, class_name: str, since: float) -> dict[str, str]:
    """Node name by actor (its Ray name, else its index) for the actors started since then."""
    names = {node_id: name for name, node_id in cluster.node_ids().items()}
    actors = cluster.actors(class_name, since=since)
    return {actor.get("name") or str(i): names.get(actor["node_id"], "?")
            for i, actor in enumerate(actors)}  # fmt: skip


@pytest.fixture(scope="module")
def one_step_off(cluster, tmp_path_factory) -> dict:
    output = tmp_path_factory.mktemp("one-step-off")
    started = time.time()
    command, env = on_cluster(cluster, output, "verl.mode=one_step_off",
                              "verl.rollout_gpus_per_node=1", "--steps", "2")  # fmt: skip
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return {
        "rows": trained_rows(output),
        "trainers": nodes_of(cluster, TRAINING_WORKER, started),
        "servers": nodes_of(cluster, ROLLOUT_SERVER, started),
    }


def test_one_step_off_trains_on_one_node_and_rolls_out_on_the_other(one_step_off):
    assert [row["step"] for row in one_step_off["rows"]] == [1, 2]
    assert all(row["grad_norm"] > 0 for row in one_step_off["rows"])
    trainer_nodes = set(one_step_off["trainers"].values())
    server_nodes = set(one_step_off["servers"].values())
    assert len(trainer_nodes) == 1 and len(server_nodes) == 1, one_step_off
    assert trainer_nodes != server_nodes and trainer_nodes | server_nodes == {"head", "worker1"}


def step_saved(output: Path, step: int) -> bool:
    latest = output / "checkpoints" / "latest_checkpointed_iteration.txt"
    try:
        return latest.read_text().strip() == str(step)
    except OSError:
        return False


@pytest.fixture(scope="module")
def node_lost_and_resumed(cluster, one_step_off, tmp_path_factory) -> dict:
    """2 nodes, 2 training processes, 2 replicas; the worker node killed once step 2 is
    saved; resumed on the head alone. (After `one_step_off`: it needs both nodes alive.)"""
    output = tmp_path_factory.mktemp("two-nodes")
    started = time.time()
    command, env = on_cluster(cluster, output, *TWO_NODES, *PPO_LORA_KL, *STEPS)
    with subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True) as process:  # fmt: skip
        try:
            deadline = time.monotonic() + 900
            while not step_saved(output, 2):
                assert process.poll() is None, process.stderr.read()[-6000:]
                assert time.monotonic() < deadline, "no checkpoint of step 2 in 900 s"
                time.sleep(0.5)
            placement = {
                "trainers": nodes_of(cluster, TRAINING_WORKER, started),
                "servers": nodes_of(cluster, ROLLOUT_SERVER, started),
            }
            cluster.kill_worker(1)
            killed = time.monotonic()
            _, stderr = process.communicate(timeout=300)
            stopped_after = time.monotonic() - killed
        finally:
            if process.poll() is None:
                process.kill()
    command, env = on_cluster(cluster, output, *HEAD_ONLY, *PPO_LORA_KL, *STEPS, "--resume")
    resumed = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert resumed.returncode == 0, resumed.stderr[-6000:]
    return {"output": output, "status": process.returncode, "stderr": stderr,
            "stopped_after": stopped_after, "rows": trained_rows(output),
            "resumed_from": resumed_from(output), **placement}  # fmt: skip


def resumed_from(output: Path) -> int:
    """The checkpoint the second attempt started from: the step before its first logged one."""
    attempts = sorted((output / "verl_metrics").glob("attempt-*.jsonl"))
    assert len(attempts) == 2, attempts
    first = json.loads(attempts[1].read_text().splitlines()[0])
    return int(first["step"]) - 1


def test_two_training_processes_and_two_replicas_spread_over_both_nodes(node_lost_and_resumed):
    run = node_lost_and_resumed
    assert sorted(run["trainers"].values()) == ["head", "worker1"], run["trainers"]
    servers = {name: node for name, node in run["servers"].items() if name.startswith("rllm")}
    assert sorted(servers.values()) == ["head", "worker1"], run["servers"]


def test_both_replicas_serve_and_get_every_weight_sync(node_lost_and_resumed):
    first, second = node_lost_and_resumed["rows"][:2]
    for row in (first, second):
        assert row["rollout/replica_turns/0"] > 0 and row["rollout/replica_turns/1"] > 0, row
    # Step 2 is sampled with the weights of update 1, on both replicas.
    assert second["rollout/replica_weights/0"] == second["rollout/replica_weights/1"] == 1


def test_a_lost_node_stops_the_run_with_one_line_on_how_to_go_on(node_lost_and_resumed):
    run = node_lost_and_resumed
    assert run["status"] == 1, run["stderr"][-4000:]
    last = run["stderr"].strip().splitlines()[-1]
    assert last.startswith("rllm-train: stopped: a node of the Ray cluster died during the run")
    saved = run["resumed_from"]
    assert saved >= 2, saved
    assert f"its last checkpoint is step {saved}: continue with --resume" in last, last
    assert run["stopped_after"] < 120  # it stops; it does not wait for a timeout


def test_resume_on_the_nodes_left_trains_on_from_the_two_process_checkpoint(
    node_lost_and_resumed,
):
    run = node_lost_and_resumed
    rows, saved = run["rows"], run["resumed_from"]
    assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6]
    for row in rows:
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row
        assert row["critic/grad_norm"] > 0 and math.isfinite(row["kl_loss"]), row
        assert row["prob_gap_max"] < PROB_GAP_TOLERANCE, row
    # The first resumed step: one replica, holding the regathered weights of update `saved`.
    resumed = rows[saved]
    assert resumed["rollout/replica_weights/0"] == saved, resumed
    assert "rollout/replica_turns/1" not in resumed
    checkpoints = run["output"] / "checkpoints"
    for model in ("actor", "critic"):  # both saved by 2 processes, both resumed in 1
        assert (checkpoints / f"global_step_{saved}/{model}/model_world_size_2_rank_1.pt").is_file()
        assert (checkpoints / f"global_step_6/{model}/model_world_size_1_rank_0.pt").is_file()
        latest = json.loads((checkpoints / f"global_step_6/{model}/fsdp_config.json").read_text())
        assert latest["world_size"] == 1
