"""The load balancer CPU runs give verl (rllm_train.verl.router): verl's routing rules, loaded
through verl's own router-plugin path, in a module that imports none of verl."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections import Counter

import pytest
from rllm_train.verl.launch import prepare_run, write_run_files
from rllm_train.verl.router import StickyLeastBusyRouter
from rllm_train.verl.spec import VerlRunSpec

from tests.parts import require_module

SERVERS = {"a": "handle-a", "b": "handle-b"}


def test_a_requests_turns_stay_on_the_server_of_its_first_turn():
    router = StickyLeastBusyRouter(SERVERS)
    first, handle = router.acquire_server("episode-1")
    assert handle == SERVERS[first]
    router.release_server(first)
    for _ in range(5):
        assert router.acquire_server("episode-1")[0] == first
        router.release_server(first)


def test_new_requests_go_to_the_least_busy_server():
    router = StickyLeastBusyRouter(SERVERS)
    taken = Counter(router.acquire_server(f"episode-{i}")[0] for i in range(10))
    assert taken == {"a": 5, "b": 5}  # each new id to a server with the fewest in flight
    assert router.get_total_inflight() == 10
    for server_id, count in taken.items():
        for _ in range(count):
            router.release_server(server_id)
    assert router.get_total_inflight() == 0
    router.release_server("a")  # a release too many does not go below zero
    assert router.get_total_inflight() == 0


def test_servers_come_and_go_and_a_removed_ones_requests_move():
    router = StickyLeastBusyRouter({"a": "handle-a"})
    assert router.acquire_server("episode-1")[0] == "a"
    router.add_servers({"b": "handle-b"})
    assert router.get_all_servers() == ["a", "b"]
    router.remove_servers(["a"])
    assert router.acquire_server("episode-1") == ("b", "handle-b")
    assert router.clear_sticky_cache() == {"cleared_entries": 1, "server_loads": {"b": 1}}
    router.remove_servers(["b"])
    with pytest.raises(RuntimeError, match="no rollout server"):
        router.acquire_server("episode-2")


def test_it_remembers_a_bounded_number_of_requests():
    router = StickyLeastBusyRouter({"a": "handle-a"}, {"sticky_requests": 3})
    for i in range(10):
        router.acquire_server(f"episode-{i}")
    assert router.clear_sticky_cache()["cleared_entries"] == 3


def test_a_cpu_run_names_it_and_verl_loads_it_from_the_run_folder(tmp_path):
    require_module("verl", "verl is not installed (pip install 'rllm-train[verl]')")
    from verl.workers.rollout.router import _load_router_yaml, _resolve_router_class

    spec = VerlRunSpec(
        env_id="rllm/FrozenLake-v0",
        model_path=str(tmp_path / "model"),
        output_dir=str(tmp_path / "run"),
        train_batch_size=2,
        n_samples=2,
        max_tasks=4,
        rollout_engine="rllm_local",
        device="cpu",
        strategy="fsdp2",
        n_gpus_per_node=1,
    )
    prepared = prepare_run(spec)
    files = write_run_files(prepared)
    path = prepared.config.actor_rollout_ref.rollout.router_config_path
    assert path == str(files.router_file)
    assert _resolve_router_class(_load_router_yaml(path)["router_class"]) is StickyLeastBusyRouter
    # A GPU run keeps verl's own balancer.
    gpu = prepare_run(dataclasses.replace(spec, device="cuda", strategy="fsdp"))
    assert gpu.config.actor_rollout_ref.rollout.router_config_path is None


def test_its_process_imports_none_of_verl():
    check = (
        "import sys, rllm_train.verl.router; assert 'verl' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", check], check=True)
