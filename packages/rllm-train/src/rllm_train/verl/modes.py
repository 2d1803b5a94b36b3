"""How verl schedules rollout against training: ``verl.mode`` = sync | one_step_off | fully_async.

* ``sync``: verl's ``RayPPOTrainer``. Rollout and training take turns on the same workers; the
  trainer's weights are loaded into the rollout in place after every update.
* ``one_step_off``: verl's ``experimental/one_step_off_policy``. The rollout has resources of
  its own and generates step N+1's batch while step N trains, so each batch comes from the
  policy one update old.
* ``fully_async``: verl's ``experimental/fully_async_policy``. A rollouter streams episodes into
  a message queue while the trainer takes batches as they fill; the rollout may run at most
  ``staleness`` batches ahead, and weights travel every ``sync_every`` trainer steps.

Both asynchronous modes keep trainer and rollout apart and move each update through a
checkpoint engine; in rllm that is :mod:`~rllm_train.verl.cpu.weight_transfer` (Ray's object
store), since verl's own engines need an accelerator or RDMA. Both use the rollout's own
log-probs as the behaviour policy's (verl's rollout-correction ``bypass_mode``), as verl's
configs for them do: recomputing them on the trainer would measure the new policy, not the one
that sampled.

This module imports nothing from the rest of the backend (``spec`` imports its checks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SYNC, ONE_STEP_OFF, FULLY_ASYNC = "sync", "one_step_off", "fully_async"
MODES: tuple[str, ...] = (SYNC, ONE_STEP_OFF, FULLY_ASYNC)
ASYNC_MODES: frozenset[str] = frozenset({ONE_STEP_OFF, FULLY_ASYNC})
WEIGHT_TRANSFER_MODULE = "rllm_train.verl.cpu.weight_transfer"
WEIGHT_TRANSFER_BACKEND = "rllm_object_store"  # weight_transfer.BACKEND_NAME (verl-free here)


@dataclass(frozen=True)
class ModeEntry:
    """verl's entry point for a mode, and the logical CPUs its controller actors reserve."""

    task_runner: str  # "module:Class", the Ray actor verl's run_ppo starts
    controller_cpus: int


MODE_ENTRIES: dict[str, ModeEntry] = {
    # TaskRunner reserves Ray's default of 1 (main_ppo_v0.py:136).
    SYNC: ModeEntry("verl.trainer.main_ppo_v0:TaskRunner", 1),
    # OneStepTaskRunner reserves 10 CPUs (one_step_off_policy/main_ppo.py:33).
    ONE_STEP_OFF: ModeEntry("verl.experimental.one_step_off_policy.main_ppo:OneStepTaskRunner", 10),
    # The task runner 1, trainer 10, rollouter 10 and message queue 2 (fully_async_main.py:35,
    # fully_async_trainer.py:53, fully_async_rollouter.py:329, message_queue.py:26).
    FULLY_ASYNC: ModeEntry(
        "verl.experimental.fully_async_policy.fully_async_main:FullyAsyncTaskRunner", 23
    ),
}


def task_runner_class(mode: str):
    """verl's task-runner actor class for `mode` (imports verl)."""
    from rllm_envs.core.loading import load_attr

    return load_attr(MODE_ENTRIES[mode].task_runner, what="verl task runner")


def mode_problems(spec: Any, algorithm: Any) -> list[str]:
    """What `spec`'s mode cannot run with `algorithm` (its rllm_train.run.algorithm entry;
    None: unknown), each with the reason (verl file:line where the limit is verl's)."""
    if spec.mode not in MODES:
        return [f"verl.mode {spec.mode!r} is not one of {list(MODES)}"]
    if spec.mode == SYNC:
        return []
    problems = []
    if spec.rollout_gpus_per_node < 1:
        problems.append(
            f"verl.mode {spec.mode} gives the rollout GPUs of its own: set "
            "verl.rollout_gpus_per_node (at least 1)"
        )
    elif spec.rollout_gpus_per_node % max(spec.tensor_parallel_size, 1):
        problems.append(
            f"tensor_parallel_size {spec.tensor_parallel_size} must divide "
            f"verl.rollout_gpus_per_node {spec.rollout_gpus_per_node}"
        )
    if spec.program is not None and spec.mode == FULLY_ASYNC:
        # Not a verl limit: the program loop's per-worker gateway has run under the synchronous
        # trainer and one_step_off's separate rollout (tests/train/test_verl_program.py), not
        # under the fully-async rollouter, so that schedule is refused until tried.
        problems.append(
            "agent programs train under verl.mode sync or one_step_off; verl.mode fully_async "
            "has not been run with the program loop"
        )
    if algorithm is not None and algorithm.greedy_baseline:
        problems.append(
            f"{algorithm.name} needs a greedy baseline rollout per task, which verl's {spec.mode} trainer "
            "does not generate (it replaces the synchronous trainer's generation step: "
            "one_step_off_policy/ray_trainer.py:206-257, fully_async_trainer.py:642-652); "
            "use grpo or rloo, or verl.mode=sync"
        )
    if algorithm is not None and algorithm.learns_values and spec.strategy != "fsdp":
        problems.append(
            f"{algorithm.name}'s critic under verl.mode {spec.mode} is built for the fsdp strategy only "
            f"(experimental/separation/ray_trainer.py:156-161), not {spec.strategy}"
        )
    if spec.mode == FULLY_ASYNC:
        if spec.val_env_kwargs is not None:
            problems.append(
                "validation with verl.mode fully_async: verl's fully-async trainer logs each "
                "step's training metrics one step late and drops the last step's when it ends "
                "on a validation step (fully_async_trainer.py:528-533, 602-603, 910-912); "
                "set trainer.val_every=0 and trainer.validate_held_out=false"
            )
        if spec.staleness < 0:
            problems.append(f"verl.staleness must be >= 0, got {spec.staleness}")
        if spec.sync_every < 1:
            problems.append(f"verl.sync_every must be at least 1, got {spec.sync_every}")
        if spec.total_steps is None:
            problems.append(
                "verl.mode fully_async needs trainer.steps: its rollouter is given the number "
                "of tasks to generate up front"
            )
    return problems


Setting = Callable[[Any, Any], Any]  # (spec, run files) -> value

# Both asynchronous modes: the rollout on resources of its own, weights through rllm's
# checkpoint engine, the rollout's log-probs as the behaviour policy's.
ASYNC_SETTINGS: dict[str, Setting] = {
    "actor_rollout_ref.hybrid_engine": lambda s, f: False,
    "+rollout.nnodes": lambda s, f: 1,
    "+rollout.n_gpus_per_node": lambda s, f: s.rollout_gpus_per_node,
    # verl's entry points copy these from the section above (one_step_off_policy/main_ppo.py:
    # 121-122); we start its task runners directly, so they are set here.
    "actor_rollout_ref.rollout.nnodes": lambda s, f: 1,
    "actor_rollout_ref.rollout.n_gpus_per_node": lambda s, f: s.rollout_gpus_per_node,
    "actor_rollout_ref.rollout.free_cache_engine": lambda s, f: False,
    "actor_rollout_ref.rollout.checkpoint_engine.backend": lambda s, f: WEIGHT_TRANSFER_BACKEND,
    "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module": lambda s, f: (
        WEIGHT_TRANSFER_MODULE
    ),
    "algorithm.rollout_correction.bypass_mode": lambda s, f: True,
}


def _tasks_per_update(spec: Any) -> int:
    return spec.mini_batch_size or spec.train_batch_size


FULLY_ASYNC_SETTINGS: dict[str, Setting] = {
    # The rollouter feeds one task at a time and the trainer counts tasks, not batches
    # (fully_async_rollouter.py:351-352): a step takes require_batches mini-batches of tasks.
    "data.train_batch_size": lambda s, f: 0,
    "+data.gen_batch_size": lambda s, f: 1,
    # The rollouter is told how many tasks to generate; the trainer stops when they are used.
    "+rollout.total_rollout_steps": lambda s, f: s.total_steps * s.train_batch_size,
    "+async_training.require_batches": lambda s, f: s.train_batch_size // _tasks_per_update(s),
    "+async_training.staleness_threshold": lambda s, f: s.staleness,
    "+async_training.trigger_parameter_sync_step": lambda s, f: s.sync_every,
    # rllm's LocalEngine finishes running requests before it swaps weights, so nothing is
    # aborted; verl resumes aborted requests only when this is on.
    "+async_training.partial_rollout": lambda s, f: True,
    "+async_training.use_trainer_do_validate": lambda s, f: False,
    "+async_training.use_dynamic_resource_scheduling": lambda s, f: False,
    "+actor_rollout_ref.actor.use_rollout_log_probs": lambda s, f: True,
    # Without it verl runs every task through its single-turn loop, not ours
    # (fully_async_policy/detach_utils.py:66-67).
    "actor_rollout_ref.rollout.multi_turn.enable": lambda s, f: True,
    # verl flushes the last step's metrics only when the run does not end on a validation step
    # (fully_async_trainer.py:529): one past the last step is never one.
    "trainer.test_freq": lambda s, f: s.total_steps + 1,
}


def mode_settings(spec: Any) -> dict[str, Setting]:
    """The verl config settings `spec`'s mode adds (none for sync)."""
    if spec.mode == ONE_STEP_OFF:
        return dict(ASYNC_SETTINGS)
    if spec.mode == FULLY_ASYNC:
        return {**ASYNC_SETTINGS, **FULLY_ASYNC_SETTINGS}
    return {}


def as_validated_by_verl(config):
    """The fully-async config as verl's ``validate_config`` can check it (a copy).

    verl's fully-async entry point never runs ``validate_config``: its batch is counted in
    tasks by the trainer (``ppo_mini_batch_size`` x ``require_batches``) and
    ``data.train_batch_size`` must be 0, which that check refuses. The copy carries the
    trainer's real batch instead, so everything else is checked as for a synchronous run.
    """
    from omegaconf import OmegaConf

    if "async_training" not in config or config.data.train_batch_size != 0:
        return config
    checked = OmegaConf.create(OmegaConf.to_container(config))
    checked.data.train_batch_size = (
        checked.actor_rollout_ref.actor.ppo_mini_batch_size * checked.async_training.require_batches
    )
    return checked
