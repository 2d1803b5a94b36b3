"""verl past one process and one node, on this machine: ``rllm-train --backend verl`` on a
2-node Ray cluster (scripts/ray_local_cluster.sh: a head and a worker node, two logical GPUs
each, so two training or rollout processes each in rllm's CPU mode).

One run of verl's one-step-off trainer covers the layout a cluster user meets:

* 2 training processes (FSDP2 over gloo) train GRPO with a KL loss: a LoRA actor whose base
  weights are the reference, both sharded over the two;
* 2 rollout replicas on the other node: verl places the trainer's resource pool on one node
  and the rollout's on the other. Both replicas serve turns and get every weight sync.
* The worker node is killed once step 2 is saved: the run stops within seconds with one line
  saying so, and ``--resume`` on the head alone (1 training process and 1 replica) regathers
  the checkpoint the 2 processes saved and trains the remaining steps.

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
from tests.train.test_verl_training import REPO_ROOT, command_and_env, trained_rows

pytestmark = pytest.mark.slow

TRAINING_WORKER = "create_colocated_worker_cls.<locals>.WorkerDict"  # verl's training actors
ROLLOUT_SERVER = "LocalEngineServer"  # rllm's rollout server, one per replica
# A KL loss: the reference (a LoRA actor's base weights) is sharded beside the actor. (A
# critic is not: verl's one-step-off trainer builds one only for its FSDP1 strategy.)
GRPO_LORA_KL = ("--algorithm", "grpo", "algorithm.kl_coef=0.01", "model.lora_rank=8",
                "model.lora_alpha=16")  # fmt: skip
ONE_STEP_OFF = ("verl.mode=one_step_off",)
# Each pool fills one node: verl packs a pool's processes onto one node each.
TWO_NODES = ("verl.nnodes=1", "verl.n_gpus_per_node=2", "verl.rollout_gpus_per_node=2")
HEAD_ONLY = ("verl.nnodes=1", "verl.n_gpus_per_node=1", "verl.rollout_gpus_per_node=1")
# A step takes a few seconds: the run has steps left to lose when the node is killed (once
# step 2 is saved), and the resumed run steps to train.
STEPS = ("--steps", "4", "trainer.save_every=1")


@pytest.fixture(scope="module")
def cluster():
    require_module("ray", "the verl backend's trainer runs on Ray: pip install 'rllm-train[verl]'")
    from tests.train.local_cluster import LocalRayCluster

    # Logical CPUs are reservations only: verl asks for several per process and controller.
    with LocalRayCluster(workers=1, gpus_per_node=2, cpus_per_node=16) as started:
        yield started


def on_cluster(cluster, output: Path, *extra: str) -> tuple[list[str], dict[str, str]]:
    return command_and_env(output, extra, cluster.address)


def nodes_of(cluster, names: dict[str, str], class_name: str, since: float) -> dict[str, str]:
    """Node name (`names`: by node id) by actor (its Ray name, else its index) for the actors
    started since then, dead ones included."""
    actors = cluster.actors(class_name, since=since)
    return {actor.get("name") or str(i): names.get(actor["node_id"], "?")
            for i, actor in enumerate(actors)}  # fmt: skip


def step_saved(output: Path, step: int) -> bool:
    latest = output / "checkpoints" / "latest_checkpointed_iteration.txt"
    try:
        return latest.read_text().strip() == str(step)
    except OSError:
        return False


@pytest.fixture(scope="module")
def node_lost_and_resumed(cluster, tmp_path_factory) -> dict:
    """2 training processes on one node, 2 replicas on the other; the worker node killed once
    step 2 is saved; resumed on the head alone."""
    output = tmp_path_factory.mktemp("two-nodes")
    names = {node_id: name for name, node_id in cluster.node_ids().items()}
    started = time.time()
    command, env = on_cluster(cluster, output, *ONE_STEP_OFF, *TWO_NODES, *GRPO_LORA_KL, *STEPS)
    with subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True) as process:  # fmt: skip
        try:
            deadline = time.monotonic() + 900
            while not step_saved(output, 2):
                assert process.poll() is None, process.stderr.read()[-6000:]
                assert time.monotonic() < deadline, "no checkpoint of step 2 in 900 s"
                time.sleep(0.2)
            # At once, so that steps are left to lose; where the actors ran is read after
            # (Ray's actor table keeps the dead ones with their node).
            cluster.kill_worker(1)
            killed = time.monotonic()
            _, stderr = process.communicate(timeout=300)
            stopped_after = time.monotonic() - killed
        finally:
            if process.poll() is None:
                process.kill()
    placement = {
        "trainers": nodes_of(cluster, names, TRAINING_WORKER, started),
        "servers": nodes_of(cluster, names, ROLLOUT_SERVER, started),
    }
    command, env = on_cluster(
        cluster, output, *ONE_STEP_OFF, *HEAD_ONLY, *GRPO_LORA_KL, *STEPS, "--resume"
    )
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


def test_training_on_one_node_and_two_replicas_on_the_other(node_lost_and_resumed):
    run = node_lost_and_resumed
    trainers = list(run["trainers"].values())
    servers = [node for name, node in run["servers"].items() if name.startswith("rllm")]
    assert len(trainers) == 2 and len(set(trainers)) == 1, run["trainers"]
    assert len(servers) == 2 and len(set(servers)) == 1, run["servers"]
    assert {trainers[0], servers[0]} == {"head", "worker1"}


def test_both_replicas_serve_and_get_every_weight_sync(node_lost_and_resumed):
    rows = node_lost_and_resumed["rows"][:2]
    for row in rows:
        assert row["rollout/replica_turns/0"] > 0 and row["rollout/replica_turns/1"] > 0, row
        # One step off: step N's batch was sampled while update N-1 trained, on both replicas
        # with the same weights.
        assert row["rollout/replica_weights/0"] == row["rollout/replica_weights/1"], row
    assert rows[1]["rollout/replica_weights/0"] == rows[0]["rollout/replica_weights/0"] + 1


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
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    for row in rows:
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row
        assert math.isfinite(row["kl_loss"]), row
    # The first resumed step: one replica, holding the regathered weights of update `saved`.
    resumed = rows[saved]
    assert resumed["rollout/replica_weights/0"] == saved, resumed
    assert "rollout/replica_turns/1" not in resumed
    checkpoints = run["output"] / "checkpoints"
    # Saved by 2 processes, resumed in 1.
    assert (checkpoints / f"global_step_{saved}/actor/model_world_size_2_rank_1.pt").is_file()
    assert (checkpoints / "global_step_4/actor/model_world_size_1_rank_0.pt").is_file()
    latest = json.loads((checkpoints / "global_step_4/actor/fsdp_config.json").read_text())
    assert latest["world_size"] == 1
