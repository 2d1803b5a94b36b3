"""Compose verl's own trainer config from a :class:`VerlRunSpec`, and validate it with verl's code.

The config is verl's ``ppo_trainer`` (or ``ppo_megatron_trainer``) Hydra config with our
settings applied as ordinary Hydra overrides, so every key is checked against verl's schema at
composition time (an unknown key fails here, not on a GPU node), and then verl's own
``validate_config`` and config dataclasses run over the result.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_agents.engines.vllm.config import ENGINE_CORE_EXECUTOR

from rllm_train.verl.modes import as_validated_by_verl, mode_settings
from rllm_train.verl.spec import VerlConfigError, VerlRunSpec

AGENT_LOOP_NAME = "rllm_agent"
AGENT_LOOP_TARGET = "rllm_train.verl.agent_loop.RllmAgentLoop"
# Agent programs (docs/agents/gateway.md) run through a gateway in each agent-loop worker.
PROGRAM_LOOP_NAME = "rllm_program"
PROGRAM_LOOP_TARGET = "rllm_train.verl.program_loop.RllmProgramLoop"
# Every loop a run's workers may be asked for, registered with them by import path.
AGENT_LOOPS: dict[str, str] = {
    AGENT_LOOP_NAME: AGENT_LOOP_TARGET,
    PROGRAM_LOOP_NAME: PROGRAM_LOOP_TARGET,
}
MANAGER_CLASS = "rllm_train.verl.failure_check.RllmAgentLoopManager"
TRAINER_CONFIG_NAMES: dict[str, str] = {
    "fsdp": "ppo_trainer",
    "fsdp2": "ppo_trainer",
    "megatron": "ppo_megatron_trainer",
}


@dataclass(frozen=True)
class RunFiles:
    """Where a run keeps what verl reads: the data files and the agent-loop registration."""

    root: Path

    @property
    def train_file(self) -> Path:
        return self.root / "data" / "train.parquet"

    @property
    def val_file(self) -> Path:
        return self.root / "data" / "val.parquet"

    @property
    def agent_loop_file(self) -> Path:
        return self.root / "agent_loops.yaml"

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "checkpoints"


def _hydra_value(value: Any) -> str:
    """A Python value as a Hydra override value (lists and strings quoted safely)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{_hydra_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(item) for item in value) + "]"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


# verl key -> how to compute its value from (spec, files). One row per setting we own.
SETTINGS: dict[str, Callable[[VerlRunSpec, RunFiles], Any]] = {
    # The legacy RayPPOTrainer drives AgentLoopManager directly; the v1 trainer needs the
    # separate TransferQueue service, which verl's PyPI package does not install.
    "trainer.use_v1": lambda s, f: False,
    "algorithm.adv_estimator": lambda s, f: s.advantage_estimator,
    "algorithm.use_kl_in_reward": lambda s, f: False,
    "critic.enable": lambda s, f: s.algorithm_entry.learns_values,
    "data.train_files": lambda s, f: [str(f.train_file)],
    "data.val_files": lambda s, f: [
        str(f.val_file) if s.val_env_kwargs is not None else str(f.train_file)
    ],
    "data.train_batch_size": lambda s, f: s.train_batch_size,
    "data.max_prompt_length": lambda s, f: s.max_prompt_tokens,
    "data.max_response_length": lambda s, f: s.max_response_tokens,
    # Rows carry a task, not the prompt: the env writes the prompt, so verl must not filter it.
    "data.filter_overlong_prompts": lambda s, f: False,
    "data.return_raw_chat": lambda s, f: True,
    "data.dataloader_num_workers": lambda s, f: 0,
    "data.seed": lambda s, f: s.seed,
    # Planned tasks (rllm_train.run.tasks) are written in the order the steps play them.
    "data.shuffle": lambda s, f: s.train_tasks is None,
    "actor_rollout_ref.model.path": lambda s, f: s.model_path,
    "actor_rollout_ref.model.lora_rank": lambda s, f: s.lora_rank,
    "actor_rollout_ref.model.lora_alpha": lambda s, f: s.lora_alpha,
    # The modules model.lora_target_modules names, as the native backend adapts them.
    "actor_rollout_ref.model.target_modules": lambda s, f: (
        list(s.lora_target_modules) or "all-linear"
    ),
    "actor_rollout_ref.actor.strategy": lambda s, f: s.strategy,
    "actor_rollout_ref.actor.optim.lr": lambda s, f: s.learning_rate,
    "actor_rollout_ref.actor.ppo_mini_batch_size": lambda s, f: (
        s.mini_batch_size or s.train_batch_size
    ),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": lambda s, f: s.micro_batch_size_per_gpu,
    "actor_rollout_ref.actor.use_kl_loss": lambda s, f: s.kl_coef > 0,
    "actor_rollout_ref.actor.kl_loss_coef": lambda s, f: s.kl_coef,
    "actor_rollout_ref.actor.entropy_coeff": lambda s, f: s.entropy_coef,
    "actor_rollout_ref.actor.clip_ratio": lambda s, f: s.clip_ratio,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": lambda s, f: (
        s.micro_batch_size_per_gpu
    ),
    "actor_rollout_ref.rollout.name": lambda s, f: s.rollout_engine,
    "actor_rollout_ref.rollout.mode": lambda s, f: "async",
    "actor_rollout_ref.rollout.n": lambda s, f: s.n_samples,
    "actor_rollout_ref.rollout.temperature": lambda s, f: s.temperature,
    "actor_rollout_ref.rollout.top_p": lambda s, f: s.top_p,
    "actor_rollout_ref.rollout.calculate_log_probs": lambda s, f: True,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": lambda s, f: s.tensor_parallel_size,
    "actor_rollout_ref.rollout.gpu_memory_utilization": lambda s, f: s.gpu_memory_utilization,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": lambda s, f: (
        s.micro_batch_size_per_gpu
    ),
    "actor_rollout_ref.rollout.agent.default_agent_loop": lambda s, f: (
        PROGRAM_LOOP_NAME if s.program is not None else AGENT_LOOP_NAME
    ),
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": lambda s, f: str(f.agent_loop_file),
    "actor_rollout_ref.rollout.agent.num_workers": lambda s, f: s.agent_workers,
    # Each step's batch is checked against the run's failure rule (verl/failure_check.py).
    "+actor_rollout_ref.rollout.agent.agent_loop_manager_class": lambda s, f: MANAGER_CLASS,
    "+rllm.max_failure_rate": lambda s, f: s.max_failure_rate,
    # RllmAgentLoop and the program loop score every episode themselves (reward_score is
    # always set, 0 for a failed one), so verl never asks its reward-loop workers; it starts 8
    # by default, each a process that imports verl (about 15 s of CPU), so none is started.
    "reward.num_workers": lambda s, f: 0,
    "trainer.n_gpus_per_node": lambda s, f: s.n_gpus_per_node,
    "trainer.nnodes": lambda s, f: s.nnodes,
    "trainer.total_epochs": lambda s, f: s.total_epochs,
    "trainer.total_training_steps": lambda s, f: s.total_steps,
    "trainer.save_freq": lambda s, f: s.save_freq,
    # Only --resume continues a run: a fresh run never picks up checkpoints it finds.
    "trainer.resume_mode": lambda s, f: "auto" if s.resume else "disable",
    "trainer.test_freq": lambda s, f: s.test_freq,
    "trainer.val_before_train": lambda s, f: s.val_env_kwargs is not None,
    "trainer.default_local_dir": lambda s, f: str(f.checkpoint_dir),
    "trainer.project_name": lambda s, f: s.project_name,
    "trainer.experiment_name": lambda s, f: s.experiment_name,
    # verl's file logger feeds the run's metrics.jsonl (rllm_train.verl.metrics_bridge).
    "trainer.logger": lambda s, f: list(dict.fromkeys([*s.loggers, "file"])),
}
# Only PPO's GAE trains a value model; it starts from the policy's weights.
CRITIC_SETTINGS: dict[str, Callable[[VerlRunSpec, RunFiles], Any]] = {
    "critic.strategy": lambda s, f: s.strategy,
    "critic.model.path": lambda s, f: s.model_path,
    "critic.ppo_micro_batch_size_per_gpu": lambda s, f: s.micro_batch_size_per_gpu,
    "critic.optim.lr": lambda s, f: s.learning_rate * s.critic_lr_scale,
}


# verl's rollout correction, on unless switched off: the rollout engine's log-probs (LocalEngine,
# vLLM) never equal the trainer's exactly, and sampling is corrected for the difference.
ROLLOUT_CORRECTION_SETTINGS: dict[str, Callable[[VerlRunSpec, RunFiles], Any]] = {
    "algorithm.rollout_correction.rollout_is": lambda s, f: s.rollout_is,
    "algorithm.rollout_correction.rollout_is_threshold": lambda s, f: s.rollout_is_threshold,
}
# rllm's LocalEngine rollout takes whole weights, so LoRA adapters are merged before each sync.
LOCAL_ROLLOUT_SETTINGS: dict[str, Callable[[VerlRunSpec, RunFiles], Any]] = {
    "actor_rollout_ref.model.lora.merge": lambda s, f: s.lora_rank > 0,
}
# Full precision on a CPU: bf16 compute there is slow, and fp32 trainer log-probs match the
# fp32 LocalEngine's, so the rollout-vs-trainer gap measures only what changed.
FP32_MIXED_PRECISION = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
# The CPU mode (rllm_train.verl.cpu): no flash-attn, no torch.compile, verl's CPU device.
CPU_SETTINGS: dict[str, Callable[[VerlRunSpec, RunFiles], Any]] = {
    "trainer.device": lambda s, f: "cpu",
    "actor_rollout_ref.model.use_remove_padding": lambda s, f: False,
    "+actor_rollout_ref.model.override_config.attn_implementation": lambda s, f: "sdpa",
    "actor_rollout_ref.actor.use_torch_compile": lambda s, f: False,
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile": lambda s, f: False,
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile": lambda s, f: False,
    "++actor_rollout_ref.actor.fsdp_config.mixed_precision": lambda s, f: FP32_MIXED_PRECISION,
    "++actor_rollout_ref.ref.fsdp_config.mixed_precision": lambda s, f: FP32_MIXED_PRECISION,
}
# verl's own vLLM rollout on vLLM's CPU build (rllm_train.verl.cpu.vllm_distribution): the CPU
# build refuses sleep mode, and without it there is no cache to free between rollout and update
# (verl's sleep/wake calls then skip the engine); eager execution (no graphs to capture on a
# CPU); float32, so the engine's log-probs are the fp32 trainer's up to rounding.
CPU_VLLM_SETTINGS: dict[str, Callable[[VerlRunSpec, RunFiles], Any]] = {
    "+actor_rollout_ref.rollout.enable_sleep_mode": lambda s, f: False,
    "actor_rollout_ref.rollout.free_cache_engine": lambda s, f: False,
    "actor_rollout_ref.rollout.enforce_eager": lambda s, f: True,
    "actor_rollout_ref.rollout.dtype": lambda s, f: "float32",
    # The model in vLLM's engine core, not in a worker process of its own (one process fewer
    # importing torch and vLLM; the environment it needs comes from vllm_distribution.ray_env).
    "+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend": lambda s, f: (
        ENGINE_CORE_EXECUTOR
    ),
    # LoRA adapters as adapters fail the first sync into vLLM 0.30 for a model with tied
    # embeddings ("'lm_head.weight' was skipped because it is tied to
    # 'model.embed_tokens.base_layer.weight'", vllm/model_executor/models/utils.py:466), and
    # verl's trainer then hangs: merged into the weights, they take the path that works.
    **LOCAL_ROLLOUT_SETTINGS,
}
CPU_CRITIC_SETTINGS: dict[str, Callable[[VerlRunSpec, RunFiles], Any]] = {
    "critic.model.use_remove_padding": lambda s, f: False,
    "+critic.model.override_config.attn_implementation": lambda s, f: "sdpa",
    "critic.fsdp.use_torch_compile": lambda s, f: False,
    "++critic.fsdp.mixed_precision": lambda s, f: FP32_MIXED_PRECISION,
}


def verl_overrides(spec: VerlRunSpec, files: RunFiles) -> list[str]:
    """The Hydra overrides that turn verl's default config into this run's config."""
    settings = {**SETTINGS, **ROLLOUT_CORRECTION_SETTINGS}
    if spec.rollout_engine == "rllm_local":
        settings.update(LOCAL_ROLLOUT_SETTINGS)
    if spec.device == "cpu":
        settings.update(CPU_SETTINGS)
        if spec.rollout_engine == "vllm":
            settings.update(CPU_VLLM_SETTINGS)
    if spec.algorithm_entry.learns_values:
        settings.update(CRITIC_SETTINGS)
        if spec.device == "cpu":
            settings.update(CPU_CRITIC_SETTINGS)
    settings.update(mode_settings(spec))
    overrides = [f"{key}={_hydra_value(value(spec, files))}" for key, value in settings.items()]
    return overrides + list(spec.overrides)


def verl_config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def compose_verl_config(spec: VerlRunSpec, files: RunFiles):
    """verl's trainer config (an OmegaConf DictConfig) for this run, schema-checked by Hydra."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = verl_overrides(spec, files)
    try:
        with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
            return compose(config_name=TRAINER_CONFIG_NAMES[spec.strategy], overrides=overrides)
    except (HydraException, OmegaConfBaseException) as error:
        raise VerlConfigError(f"verl rejected the composed config: {error}") from error


def trainer_needs(config) -> tuple[bool, bool]:
    """(reference policy, critic) as verl's trainer decides them."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    return need_reference_policy(config), need_critic(config)


def validate_verl_config(config) -> None:
    """Run verl's own checks (batch divisibility, micro-batch rules, config dataclasses).

    verl signals problems with ``assert`` and ``ValueError``; both become
    :class:`VerlConfigError` so the user sees one kind of message before anything starts.
    """
    import contextlib
    import io

    from hydra.errors import InstantiationException
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    use_reference, use_critic = trainer_needs(config)
    checked = without_vllm_only_checks(as_validated_by_verl(config))
    try:
        # validate_config reports success on stdout; keep dry-run output to the config itself.
        with contextlib.redirect_stdout(io.StringIO()):
            validate_config(checked, use_reference_policy=use_reference, use_critic=use_critic)
        for section in DATACLASS_SECTIONS:
            omega_conf_to_dataclass(OmegaConf.select(config, section))
    except InstantiationException as error:
        # verl builds the critic's model config eagerly, which reads the model's files.
        raise VerlConfigError(
            f"verl could not load a model config (is the model path a local Hugging Face model "
            f"directory or a hub id reachable from here?): {error}"
        ) from error
    except (AssertionError, ValueError, TypeError) as error:
        raise VerlConfigError(f"verl's config validation failed: {error}") from error


def without_vllm_only_checks(config):
    """`config`, minus what only an installed vLLM can check.

    For LoRA with vLLM, ``validate_config`` imports verl's vLLM helpers, which refuse to import
    without vLLM; a dry run on a machine without GPUs has none. The rank limit that check
    enforces (vLLM's largest LoRA rank) is checked in :func:`~rllm_train.verl.spec.validate_spec`,
    and verl checks it again at launch, where vLLM is installed.
    """
    from importlib.util import find_spec

    from omegaconf import OmegaConf

    if config.actor_rollout_ref.rollout.name != "vllm" or find_spec("vllm") is not None:
        return config
    checked = OmegaConf.create(OmegaConf.to_container(config))  # a copy; the original is kept
    checked.actor_rollout_ref.model.lora_rank = 0
    if "lora" in checked.actor_rollout_ref.model:
        checked.actor_rollout_ref.model.lora.rank = 0
    return checked


# Sections verl turns into its typed config dataclasses (their __post_init__ checks run).
DATACLASS_SECTIONS: tuple[str, ...] = ("algorithm", "actor_rollout_ref.rollout")
