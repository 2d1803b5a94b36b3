"""Where a verl run trains and what serves its rollouts, when the config leaves it to us.

``trainer.device=auto`` (the default) picks the GPUs when this machine has them or a Ray
cluster is named (``RAY_ADDRESS``), else rllm's CPU mode. ``verl.rollout_engine=auto`` picks
vLLM, then SGLang, where installed, else rllm's LocalEngine (the only one on a CPU).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.util import find_spec

from rllm_train.verl.spec import CPU_ROLLOUT, CPU_STRATEGY, VerlConfigError

# verl's own servers, in order of preference, by the module that must be importable.
GPU_ROLLOUT_PREFERENCE: tuple[tuple[str, str], ...] = (("vllm", "vllm"), ("sglang", "sglang"))
AGENT_WORKERS = {"cpu": 2, "cuda": 8}  # Ray actors running agent loops (one process each)
CLUSTER_GPUS_PER_NODE = 8  # a named Ray cluster's nodes, when this machine cannot tell


@dataclass(frozen=True)
class Placement:
    device: str  # "cuda" | "cpu"
    rollout_engine: str
    strategy: str
    n_gpus_per_node: int  # on a CPU: training processes
    agent_workers: int
    chosen_for_user: bool  # the device was picked by `auto`, not named
    rollout_gpus_per_node: int  # the rollout's own, in verl's asynchronous modes (0: not given)


def _gpus_here() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(requested: str) -> tuple[str, bool]:
    """("cuda" | "cpu", whether it was auto-picked) for ``trainer.device``."""
    if requested == "auto":
        uses_gpus = bool(os.environ.get("RAY_ADDRESS")) or _gpus_here() > 0
        return ("cuda" if uses_gpus else "cpu"), True
    if requested == "cpu" or requested.startswith("cuda"):
        return ("cpu" if requested == "cpu" else "cuda"), False
    raise VerlConfigError(f"trainer.device: {requested!r} is not auto, cpu or cuda[:N]")


def resolve_rollout_engine(requested: str, device: str) -> str:
    if requested != "auto":
        return requested
    if device == "cpu":
        return CPU_ROLLOUT
    for engine, module in GPU_ROLLOUT_PREFERENCE:
        if find_spec(module) is not None:
            return engine
    return CPU_ROLLOUT  # rllm's LocalEngine on the GPU: the fallback without vLLM/SGLang


def placement(
    device: str,
    rollout_engine: str,
    strategy: str,
    n_gpus_per_node: int,
    agent_workers: int,
    rollout_gpus_per_node: int = 0,
) -> Placement:
    """What the run uses; 'auto' and 0 are resolved for this machine (on a GPU machine the
    rollout's own GPUs of an asynchronous mode must be named: they are taken from training)."""
    resolved, chosen = resolve_device(device)
    gpus = n_gpus_per_node or (1 if resolved == "cpu" else (_gpus_here() or CLUSTER_GPUS_PER_NODE))
    return Placement(
        device=resolved,
        rollout_engine=resolve_rollout_engine(rollout_engine, resolved),
        strategy=CPU_STRATEGY if strategy == "auto" else strategy,
        n_gpus_per_node=gpus,
        agent_workers=agent_workers or AGENT_WORKERS[resolved],
        chosen_for_user=chosen,
        rollout_gpus_per_node=rollout_gpus_per_node or (1 if resolved == "cpu" else 0),
    )


# What serves the rollout in CPU mode, as the notice names it.
CPU_ROLLOUT_NAMES = {CPU_ROLLOUT: "rllm's LocalEngine", "vllm": "verl's vLLM on vLLM's CPU build"}


def cpu_mode_notice(
    device: str, chosen_for_user: bool, rollout_engine: str = CPU_ROLLOUT
) -> str | None:
    """One line saying the CPU mode was picked for the user (None when they named it)."""
    if device != "cpu" or not chosen_for_user:
        return None
    rollout = CPU_ROLLOUT_NAMES.get(rollout_engine, rollout_engine)
    return (
        f"rllm-train: no GPU on this machine: verl trains in CPU mode (FSDP2 on gloo, {rollout} "
        "as the rollout; --device cuda to refuse)"
    )
