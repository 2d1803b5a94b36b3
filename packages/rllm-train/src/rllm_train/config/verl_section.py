"""`VerlOptions`: the ``verl`` section of an ``rllm-train`` config.

Only the verl backend reads it (the native backend ignores it). It is a config section like the
others, so it lives with them: the config imports no backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class VerlOptions:
    """The ``verl`` section of an ``rllm-train`` config (ignored by the native backend)."""

    n_gpus_per_node: int = 0  # 0: this machine's GPUs (1 training process in CPU mode)
    nnodes: int = 1
    rollout_engine: str = "auto"  # auto | vllm | sglang | rllm_local (rllm's LocalEngine)
    strategy: str = "auto"  # auto (fsdp2) | fsdp | fsdp2 | megatron
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.6
    agent_workers: int = 0  # 0: 8 on GPUs, 2 in CPU mode
    rollout_is: str = "token"  # rollout correction: token | sequence | off
    rollout_is_threshold: float = 2.0
    mini_batch_size: int = 0  # tasks per optimizer step; 0 = rollout.tasks_per_step
    response_tokens: int = 0  # whole-episode response budget; 0 = derived from rollout.*
    project_name: str = "rllm"
    episode_timeout_s: float = 0  # wall-clock limit per episode; 0 = none
    # How verl schedules rollout and training (rllm_train.verl.modes): sync (verl's
    # RayPPOTrainer, the two take turns), one_step_off (step N trains on the rollout made during
    # step N-1) or fully_async (rollout streams; the trainer takes batches as they fill).
    mode: str = "sync"
    rollout_gpus_per_node: int = 0  # the rollout's own GPUs in the async modes; 0: 1 on a CPU
    staleness: float = 0.1  # fully_async: how far beyond the next batch the rollout may run
    sync_every: int = 1  # fully_async: trainer steps between weight syncs to the rollout
    overrides: list[str] = field(default_factory=list)  # raw verl "key=value", applied last
