"""Start a run of verl's own trainer: the run's own Ray cluster (in CPU mode, one whose processes
load :mod:`rllm_train.verl.cpu`), then verl's stock task runner for the run's mode
(:mod:`rllm_train.verl.modes`).

The cluster declares one logical GPU per training process, and in the asynchronous modes one
per rollout process too: verl's resource pools are built from GPU bundles, and the CPU platform
maps them to nothing. Its logical CPU count only satisfies the reservations of the bundles and
of verl's controller actors; torch in each worker still uses the real cores.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_agents import reaper
from rllm_agents.run_folder import SignalUnwinder, as_received_signal, terminate_on_signals

from rllm_train.verl.cpu import CPU_MODE_VARIABLE
from rllm_train.verl.cpu.vllm_distribution import ray_env as vllm_cpu_env
from rllm_train.verl.modes import ASYNC_MODES, MODE_ENTRIES, SYNC, task_runner_class
from rllm_train.verl.node_loss import NodesDied, alive_nodes, nodes_died

PLUGIN_MODULE = "rllm_train.verl.cpu"
# What every process of a CPU-mode run needs before it imports verl.
CPU_MODE_ENV: dict[str, str] = {
    "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
    CPU_MODE_VARIABLE: "1",
    "VERL_PLATFORM": "cpu",
    # verl registers its FSDP engines for the cuda and npu devices; the cuda ones run on any
    # torch device, so the CPU platform selects them by name.
    "VERL_ENGINE_DEVICE": "cuda",
    "TOKENIZERS_PARALLELISM": "false",
}
# On GPUs the plugin adds no platform, only what every run has: the rllm_local rollout (the
# fallback where vLLM and SGLang are absent) and resuming across process counts.
GPU_RUN_ENV: dict[str, str] = {"VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE}
# verl reserves this many CPUs per GPU bundle (3), plus its task runner, agent-loop and
# reward workers; logical CPUs cost nothing, so the cluster declares plenty.
LOGICAL_CPUS_PER_PROCESS = 4
LOGICAL_CPUS_SPARE = 16


@dataclass(frozen=True)
class RayCluster:
    """The Ray cluster a run starts for itself (None of it when joining ``RAY_ADDRESS``)."""

    env_vars: dict[str, str]
    temp_dir: str | None = None
    logical_gpus: int | None = None  # None: Ray counts the machine's GPUs
    logical_cpus: int | None = None

    @staticmethod
    def joins_a_cluster() -> bool:
        return bool(os.environ.get("RAY_ADDRESS"))

    def init_kwargs(self, verl_runtime_env: dict[str, Any]) -> dict[str, Any]:
        env_vars = {**verl_runtime_env.get("env_vars", {}), **self.env_vars}
        kwargs: dict[str, Any] = {
            "runtime_env": {**verl_runtime_env, "env_vars": env_vars},
            "include_dashboard": False,
        }
        if self.joins_a_cluster():
            return kwargs  # the user's cluster: Ray reads the address itself
        # A cluster of the run's own: never join another Ray running on the machine.
        kwargs.update(address="local", _temp_dir=self.temp_dir)
        if self.logical_gpus is not None:
            kwargs.update(num_gpus=self.logical_gpus, num_cpus=self.logical_cpus)
        return kwargs


def ray_cluster(spec, run_root: Path) -> RayCluster:
    """The cluster for `spec`: CPU mode's logical GPUs, or the machine's real ones."""
    run_root.mkdir(parents=True, exist_ok=True)
    env_vars = {
        # verl's file logger and TensorBoard write into the run folder (see metrics_bridge).
        "VERL_FILE_LOGGER_PATH": str(verl_metrics_file(run_root)),
        "TENSORBOARD_DIR": str(run_root / "tensorboard"),
        # Env modules named by the user (--env my_pkg.envs:my/Env-v0) import in the workers
        # as they do here: the same working directory and PYTHONPATH.
        "PYTHONPATH": os.pathsep.join(
            part for part in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if part
        ),
    }
    # Ray's socket paths must stay short (a Unix socket path holds 107 bytes): a short root.
    temp_dir = tempfile.mkdtemp(prefix="rllm-ray-", dir="/tmp")
    if spec.device == "cpu":
        processes = spec.n_gpus_per_node * spec.nnodes + rollout_processes(spec)
        rollout_env = vllm_cpu_env() if spec.rollout_engine == "vllm" else {}
        return RayCluster(
            env_vars={**CPU_MODE_ENV, **rollout_env, **torch_threads(), **env_vars},
            temp_dir=temp_dir,
            logical_gpus=processes,
            logical_cpus=LOGICAL_CPUS_PER_PROCESS * processes
            + spec.agent_workers
            + MODE_ENTRIES[spec.mode].controller_cpus
            + LOGICAL_CPUS_SPARE,
        )
    env_vars.update(GPU_RUN_ENV)
    return RayCluster(env_vars=env_vars, temp_dir=temp_dir)


def rollout_processes(spec) -> int:
    """The rollout's own processes: none in sync mode (it shares the training workers)."""
    return spec.rollout_gpus_per_node if spec.mode in ASYNC_MODES else 0


def torch_threads() -> dict[str, str]:
    """Let torch in each worker use every core, as it would outside Ray.

    Ray pins ``OMP_NUM_THREADS`` to an actor's CPU reservation (1) unless it is set; the
    reservations here are logical, and verl's processes compute one at a time (rollout, then
    log-probs, then update), so each may use the whole machine. A value the user set wins.
    """
    threads = os.environ.get("OMP_NUM_THREADS") or str(os.cpu_count() or 1)
    return {"OMP_NUM_THREADS": threads}


def verl_metrics_file(run_root: Path) -> Path:
    """A new file for this attempt's raw verl metrics (verl's file logger truncates its file)."""
    folder = run_root / "verl_metrics"
    folder.mkdir(parents=True, exist_ok=True)
    attempt = len(list(folder.glob("attempt-*.jsonl"))) + 1
    return folder / f"attempt-{attempt:03d}.jsonl"


def beside_the_driver(runner_class):
    """verl's task runner (the run's controller) placed on the driver's node where it can be.

    Left to Ray, it may land on any node; on a cluster, losing that node would end the run
    with no controller left to say what happened. Beside the driver (on the head, where
    ``rllm-train`` is typically started) it lives as long as the driver's own machine.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    return runner_class.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=True)
    )


def run_verl(config, cluster: RayCluster, mode: str = SYNC) -> None:
    """verl's ``run_ppo`` with the stock task runner of `mode`, on the run's own Ray cluster."""
    import ray
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
    from verl.trainer.main_ppo import run_ppo

    handler = signal.getsignal(signal.SIGTERM)
    ray.init(**cluster.init_kwargs(get_ppo_ray_runtime_env(config)))
    # ray.init puts its own SIGTERM handlers in place (Python's exits with the signal number,
    # and the driver's C++ one dumps the stack and aborts: status 134). The CLI's handler
    # goes back, so SIGTERM unwinds this run as it does a native one (143, and the line on
    # how to resume); a program that had none of ours keeps Ray's.
    if isinstance(handler, SignalUnwinder):
        terminate_on_signals()
    # A cluster of the run's own is the driver's to end: once the driver is gone, kill -9
    # included, a watchdog kills what is left (Ray's agents outlive it) and removes its folder.
    watchdog = None if cluster.joins_a_cluster() else reaper.watch(os.getpid())
    if watchdog is not None and cluster.temp_dir:
        watchdog.remove_folder(cluster.temp_dir)
    nodes_at_start = alive_nodes()
    try:
        with as_received_signal():  # run_ppo waits in ray.get, which swallows our exception
            run_ppo(config, task_runner_class=beside_the_driver(task_runner_class(mode)))
    except Exception as error:
        # Asked while Ray is still up: a node lost under the run is said as such.
        dead = nodes_died(nodes_at_start, error)
        if dead:
            raise NodesDied(dead) from error
        raise
    finally:
        ray.shutdown()
        if watchdog is not None:
            watchdog.release()
        if cluster.temp_dir:
            shutil.rmtree(cluster.temp_dir, ignore_errors=True)
