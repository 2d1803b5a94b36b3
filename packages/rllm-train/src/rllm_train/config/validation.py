"""Checks on a whole config, run before anything slow starts; each error names the key.

What a backend cannot honour is not checked here but in :mod:`rllm_train.run.refusals`, which
:func:`validate` consults for the config's backend.
"""

from __future__ import annotations

import math
from typing import Any

from rllm_train.config.compaction import compaction_problems
from rllm_train.config.curriculum import CURRICULUM_KINDS, check_curriculum
from rllm_train.config.distill import distill_problems
from rllm_train.config.reward import check_judge
from rllm_train.config.rollout_correction import check_rollout_correction
from rllm_train.config.sections import (
    ALGORITHMS,
    BACKENDS,
    DTYPES,
    EXECUTORS,
    ROLLOUT_DISPATCH,
    ROLLOUT_ENGINES,
    ROLLOUT_MODES,
    SEQUENCE_MODES,
    ConfigError,
    TrainConfig,
)
from rllm_train.config.tree import tree_problems
from rllm_train.run.algorithm import algorithm, names_where

# Values that must come from a fixed set: dotted key -> allowed values.
CHOICES: dict[str, tuple[str, ...]] = {
    "algorithm.name": ALGORITHMS,
    "algorithm.sequence_mode": SEQUENCE_MODES,
    "trainer.backend": BACKENDS,
    "model.dtype": DTYPES,
    "rollout.dispatch": ROLLOUT_DISPATCH,
    "rollout.executor": EXECUTORS,
    "rollout.mode": ROLLOUT_MODES,
    "rollout.engine": ROLLOUT_ENGINES,
    "curriculum.kind": CURRICULUM_KINDS,
}

# Numbers that must be positive (> 0) or non-negative (>= 0).
POSITIVE = (
    "rollout.tasks_per_step",
    "rollout.n",
    "rollout.val_n",
    "rollout.max_response_tokens",
    "rollout.max_prompt_tokens",
    "rollout.max_staleness",
    "multiagent.max_cycles",
    "trainer.steps",
    "algorithm.critic_lr_scale",
    "trainer.micro_batch_size",
    "trainer.ppo_epochs",
    "trainer.keep_checkpoints",
    "sft.batch_size",
    "curriculum.temperature",
)
NON_NEGATIVE = (
    "rollout.max_turns",  # 0: the env's own limit (run.defaults.resolve_max_turns)
    "trainer.lr",  # 0: the method's own (run.defaults.resolve_lr)
    "rollout.temperature",
    "rollout.val_temperature",
    "rollout.ray_workers",
    "rollout.engine_slots",
    "rollout.engine_threads",
    "program.timeout",
    "program.retries",
    "algorithm.kl_coef",
    "model.lora_rank",
    "trainer.save_every",
    "trainer.val_every",
    "trainer.val_tasks",
    "trainer.max_grad_norm",
    "trainer.cpu_threads",
    "curriculum.seed_pool",
)


def get_value(config: TrainConfig, dotted: str) -> Any:
    section, _, key = dotted.partition(".")
    return getattr(getattr(config, section), key)


# Values a key took in an earlier version, with the setting that now does their job.
RETIRED_VALUES = {
    ("rollout.engine", "lockstep"): "rollout.dispatch=lockstep",
    ("rollout.engine", "execution"): "rollout.dispatch=lockstep",
}


def validate(config: TrainConfig) -> None:
    for (key, value), successor in RETIRED_VALUES.items():
        if get_value(config, key) == value:
            raise ConfigError(
                f"{key}={value}: the trainer's own rollout loop is gone, and {key} now picks "
                f"the generating engine ({', '.join(CHOICES[key])}); use {successor}"
            )
    for key, allowed in CHOICES.items():
        if get_value(config, key) not in allowed:
            raise ConfigError(
                f"{key}: {get_value(config, key)!r} is not one of {', '.join(allowed)}"
            )
    for key in POSITIVE:
        if not get_value(config, key) > 0:
            raise ConfigError(f"{key}: must be greater than 0, got {get_value(config, key)!r}")
    for key in NON_NEGATIVE:
        if get_value(config, key) < 0:
            raise ConfigError(f"{key}: must be 0 or more, got {get_value(config, key)!r}")
    # What the chosen backend cannot honour, before anything backend-agnostic: its reason says
    # what to change (rllm_train.run.refusals).
    from rllm_train.run.refusals import refusals

    refused = refusals(config, config.trainer.backend)
    if refused:
        raise ConfigError("; ".join(refused))
    entry = algorithm(config.algorithm.name)
    _check_sft(config)
    if not config.env.id.strip():
        raise ConfigError("env.id: must name a Gymnasium environment id")
    if config.rollout.executor == "ray":
        _check_ray_rollouts(config)
    if config.program.given:
        _check_program(config)
    _check_rollout_engine(config)
    if not 0.0 <= config.trainer.max_failure_rate <= 1.0:
        raise ConfigError(
            "trainer.max_failure_rate: a share of a step's episodes, from 0 to 1, got "
            f"{config.trainer.max_failure_rate}"
        )
    if not 0.0 <= config.algorithm.rae_decay < 1.0:
        raise ConfigError(
            f"algorithm.rae_decay: must be at least 0 and below 1, got {config.algorithm.rae_decay}"
        )
    if config.algorithm.drop_zero_advantage and (
        entry.learns_values or config.algorithm.kl_coef > 0
    ):
        backend = config.trainer.backend
        usable = names_where(lambda a: a.plays_tasks and not a.learns_values and a.runs_on(backend))
        raise ConfigError(
            "algorithm.drop_zero_advantage: sequences without advantage still train the value "
            f"head ({', '.join(names_where(lambda a: a.learns_values))}) and the KL penalty; use "
            f"it with {', '.join(usable)} and kl_coef=0"
        )
    problems = check_rollout_correction(
        config.algorithm.rollout_correction, "algorithm.rollout_correction"
    )
    problems += check_judge(config.reward.judge, "reward.judge")
    problems += distill_problems(config)
    if config.reward.judge.on and not entry.plays_tasks:
        problems.append(
            f"reward.judge.mode: --algorithm {entry.name} trains on recorded episodes and plays "
            "none for a judge to score; set it to off"
        )
    if problems:
        raise ConfigError("; ".join(problems))
    problems = tree_problems(config) + compaction_problems(config)
    if problems:
        raise ConfigError("; ".join(problems))
    _check_curriculum(config)
    if entry.compares_group and config.rollout.n < 2:
        raise ConfigError(
            f"rollout.n: {config.algorithm.name} compares rollouts within a group, so it needs "
            f"at least 2 per task, got {config.rollout.n}"
        )


def _check_curriculum(config: TrainConfig) -> None:
    problems = check_curriculum(config.curriculum)
    if problems:
        raise ConfigError("; ".join(problems))
    if config.curriculum.weighted and not algorithm(config.algorithm.name).plays_tasks:
        raise ConfigError(
            f"curriculum.kind={config.curriculum.kind}: --algorithm {config.algorithm.name} "
            "trains on recorded episodes and plays no tasks; leave curriculum.kind=uniform"
        )


def _check_sft(config: TrainConfig) -> None:
    if algorithm(config.algorithm.name).plays_tasks:
        if config.sft.data:
            raise ConfigError(
                f"sft.data: recorded episodes are trained on with --algorithm sft, not "
                f"{config.algorithm.name}"
            )
        return
    if not config.sft.data:
        raise ConfigError(
            "sft.data: --algorithm sft trains on recorded episodes; name them with --data "
            "RUN_FOLDER_OR_FILE (an rllm-eval --output folder or an episodes.jsonl)"
        )
    if not math.isfinite(config.sft.min_reward):
        raise ConfigError(f"sft.min_reward: must be a finite number, got {config.sft.min_reward}")


def _check_ray_rollouts(config: TrainConfig) -> None:
    if config.rollout.dispatch != "async":
        raise ConfigError(
            "rollout.executor=ray runs each episode on a Ray worker, while lockstep dispatch "
            "plays every episode's turns in one process: set rollout.dispatch=async"
        )


def check_engine_replicas(config: TrainConfig, given_engine: str | None = None) -> None:
    """``rollout.engine_replicas``: at least one, and more only where the episodes come from
    engines apart. ``auto`` in sync mode is settled once the run is set up
    (run.defaults.resolve_engine), which checks again with `given_engine` = what was asked."""
    rollout = config.rollout
    replicas = rollout.engine_replicas
    if replicas < 1:  # an integer: the loader has checked its type
        raise ConfigError(
            f"rollout.engine_replicas: how many rollout engines to start, at least 1, got "
            f"{replicas!r}"
        )
    if replicas == 1 or rollout.mode == "async" or rollout.engine != "local":
        return
    became = (
        " (rollout.engine=auto became local: llama.cpp cannot play this run)"
        if given_engine == "auto"
        else ""
    )
    raise ConfigError(
        f"rollout.engine_replicas={replicas}: replicas are engines apart from the trained "
        f"model, and rollout.engine=local in rollout.mode=sync samples from the trained model "
        f"itself{became}; use rollout.engine=process, llamacpp or vllm, or rollout.mode=async"
    )


def _check_rollout_engine(config: TrainConfig) -> None:
    rollout = config.rollout
    _check_engine_options(config)
    check_engine_replicas(config)
    # auto becomes local wherever an engine apart cannot play (run.defaults.resolve_engine).
    apart = rollout.mode == "async" or rollout.engine not in ("local", "auto")
    if not apart:
        if rollout.partial_rollouts:
            raise ConfigError(
                "rollout.partial_rollouts: episodes carry over an update only in rollout.mode=async"
            )
        return
    if config.program.given:
        raise ConfigError(
            "rollout.mode / rollout.engine: an agent program is served the trained model "
            "through the gateway, synchronously; leave rollout.mode=sync, rollout.engine=local"
        )
    if rollout.executor != "inline":
        raise ConfigError(
            "rollout.mode / rollout.engine: episodes on Ray workers are played from the "
            "trained model itself; use rollout.executor=inline with an engine apart"
        )


def _check_engine_options(config: TrainConfig) -> None:
    options = config.rollout.engine_options
    if not options:
        return
    if config.rollout.engine != "vllm":
        raise ConfigError(
            "rollout.engine_options: settings of rollout.engine=vllm, got rollout.engine="
            f"{config.rollout.engine}"
        )
    from rllm_agents.engines.vllm.config import VLLMSettings

    try:  # the settings' own checks (sync_pause, kv_cache_gib); other names go to vLLM
        VLLMSettings().replace(**options)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"rollout.engine_options: {error}") from error


def _check_program(config: TrainConfig) -> None:
    program = config.program
    if program.function and program.command:
        raise ConfigError(
            "program: set program.function or program.command, not both (one agent program)"
        )
    if config.rollout.executor != "inline":
        raise ConfigError(
            "rollout.executor: agent programs run beside the gateway that serves the trained "
            "model to them (in the trainer's process, or in verl's agent-loop workers); use "
            "rollout.executor=inline"
        )
    if config.env.agent:
        raise ConfigError("env.agent: an agent program plays the env; leave env.agent empty")
