"""Fixtures of the trainer tests: the tiny random model every native run uses."""

from __future__ import annotations

import os

import pytest

from tests.group_resources import shared


def start_verl_ray_head():
    from tests.train.ray_head import RayHead

    head = RayHead(num_gpus=2, num_cpus=64)
    return head, head.stop


@pytest.fixture(scope="module")
def verl_ray_head(request):
    """One Ray cluster that the verl tests' runs join (``RAY_ADDRESS``), as a user's runs
    would: each run then skips starting and stopping a cluster of its own. Two logical GPUs
    (trainer and rollout in the asynchronous modes) and the CPUs verl's controller actors
    reserve in fully-async mode. Shared by the verl-runs group (tests/scheduling.py) and
    stopped when its last test ends (tests/group_resources.py): an idle head's processes
    would go on using the CPU beside the rest of the suite."""
    from tests.parts import require_module

    require_module("ray", "the verl backend's trainer runs on Ray: pip install 'rllm-train[verl]'")
    return shared(request, "verl_ray_head", start_verl_ray_head)


def start_local_ray_cluster():
    from tests.train.local_cluster import LocalRayCluster

    cluster = LocalRayCluster(workers=1, gpus_per_node=1, cpus_per_node=8)
    cluster.start()
    return cluster, cluster.stop  # the stop raises if a process of the cluster is left


@pytest.fixture(scope="module")
def local_ray_cluster(request):
    """A two-node Ray cluster on this machine (scripts/ray_local_cluster.sh): a head and node
    "worker1", each its own Ray node with one logical GPU and 8 CPUs, for multi-node
    placement and node loss. Started once for its group (tests/group_resources.py) and
    stopped when the group's last test ends; a test that kills a node leaves it killed."""
    from tests.parts import require_module

    require_module("ray", "the local Ray cluster runs Ray: pip install 'rllm-agents[ray]'")
    return shared(request, "local_ray_cluster", start_local_ray_cluster)


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """The model name (or local path) the trainer tests train: rllm-agents' seeded "tiny"."""
    override = os.environ.get("RLLM_TEST_TINY_MODEL")  # a local copy, to work offline on it
    if override:
        return override
    from rllm_agents.models import resolve_model

    return str(resolve_model("tiny"))


def run_overrides(output, model: str, **changes) -> dict:
    """A fast native run: few tasks, short replies, no progress bar; on the one-turn addition
    task (``--config arithmetic``), whose single 6-token replies keep a step cheap."""
    overrides = {
        "env.id": "rllm/Arithmetic-v0",
        "model.lora_rank": 0,  # full fine-tuning; the tests that want a LoRA set it
        "trainer.val_every": 0,
        "trainer.val_tasks": 16,
        "model.name": model,
        "trainer.output": str(output),
        "trainer.progress": False,
        "trainer.steps": 2,
        "trainer.save_every": 0,
        "rollout.tasks_per_step": 2,
        "rollout.n": 2,
        "rollout.max_response_tokens": 6,
        "trainer.lr": 1e-3,
        "trainer.validate_held_out": False,  # the tests that want it turn it on
    }
    overrides.update(changes)
    return overrides
