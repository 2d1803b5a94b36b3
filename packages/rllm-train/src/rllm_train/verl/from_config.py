"""`rllm-train` config -> :class:`VerlRunSpec`: one config, two backends.

The shared sections (model, env, rollout, algorithm, trainer) mean the same for both backends;
what only verl has (GPUs per node, nodes, the rollout server, parallelism, raw verl overrides)
lives in :class:`VerlOptions`, the config's optional ``verl`` section. Settings the verl backend
cannot honour are refused here with the key to change.
"""

from __future__ import annotations

import os
from typing import Any

from rllm_train.config.verl_section import VerlOptions
from rllm_train.run.refusals import refusals
from rllm_train.run.setup import RunSetup, setup_run
from rllm_train.run.specs import check_json_arguments
from rllm_train.verl.placement import placement
from rllm_train.verl.program_ref import ProgramRef
from rllm_train.verl.spec import VerlConfigError, VerlRunSpec

__all__ = ["VerlOptions", "model_path", "response_budget", "spec_from_config"]

# Model names the project ships or builds; anything else is a path or a hub id verl loads.
PROJECT_MODELS = frozenset({"tiny", "smollm2"})


def model_path(name: str) -> str:
    if name in PROJECT_MODELS:
        from rllm_agents.models import resolve_model

        return str(resolve_model(name))
    return name


def response_budget(rollout: Any, options: VerlOptions, *, program: bool = False) -> int:
    """verl's ``response_length``: every token after the first prompt, all turns together.

    Single-turn: one reply of ``rollout.max_response_tokens``. Multi-turn: the native backend
    caps the whole conversation at ``rollout.max_prompt_tokens``, so later turns and the env's
    replies share that budget. An agent program makes as many calls as it likes (``max_turns``
    does not bound it), so it gets the multi-turn budget.
    """
    if options.response_tokens:
        return options.response_tokens
    if rollout.max_turns == 1 and not program:
        return rollout.max_response_tokens
    return max(rollout.max_prompt_tokens, rollout.max_response_tokens)


def _algorithm_overrides(algorithm: Any, trainer: Any) -> list[str]:
    """The algorithm knobs both backends share, under verl's names."""
    return [
        f"algorithm.gamma={algorithm.gamma}",
        f"algorithm.lam={algorithm.lam}",
        f"algorithm.norm_adv_by_std_in_grpo={str(algorithm.norm_adv_by_std_in_grpo).lower()}",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={algorithm.policy_loss}",
        f"actor_rollout_ref.actor.loss_agg_mode={algorithm.loss_agg_mode}",
        f"actor_rollout_ref.actor.kl_loss_type={algorithm.kl_penalty}",
        f"actor_rollout_ref.actor.ppo_epochs={trainer.ppo_epochs}",
        f"actor_rollout_ref.actor.grad_clip={trainer.max_grad_norm}",
        f"actor_rollout_ref.actor.optim.weight_decay={trainer.weight_decay}",
    ]


def refuse_what_verl_cannot_run(config: Any) -> None:
    """The shared refusal rules for verl (rllm_train.run.refusals), all at once, with reasons."""
    refused = refusals(config, "verl")
    if refused:
        raise VerlConfigError("; ".join(refused))


def program_ref(config: Any, program: Any) -> ProgramRef | None:
    """The run's agent program (loaded and checked by the run's setup) as the rows carry it."""
    if program is None:
        return None
    section = config.program
    return ProgramRef(
        function=section.function,
        command=section.command,
        cwd=os.getcwd(),
        timeout_s=section.timeout or None,
        retries=section.retries,
    )


def spec_from_config(config: Any, setup: RunSetup | None = None) -> VerlRunSpec:
    """The :class:`~rllm_train.verl.spec.VerlRunSpec` a ``TrainConfig`` describes, from its
    :class:`~rllm_train.run.setup.RunSetup` (made here unless given): the same agent, env and
    task plan the native backend would play."""
    refuse_what_verl_cannot_run(config)
    if setup is None:
        setup = setup_run(config, backend="verl")
    check_json_arguments(setup.agent)
    options = getattr(config, "verl", None) or VerlOptions()
    rollout, trainer, algorithm = config.rollout, config.trainer, config.algorithm
    overrides = _algorithm_overrides(algorithm, trainer)
    overrides.append(f"actor_rollout_ref.rollout.val_kwargs.temperature={rollout.val_temperature}")
    if setup.algorithm.learns_values:
        overrides.append(f"critic.cliprange_value={algorithm.cliprange_value}")
    loggers = ("console", "tensorboard") if trainer.tensorboard else ("console",)
    data = setup.data
    program = program_ref(config, setup.program)
    # Validation: every val_every steps, or (held-out rows at hand) before and after training.
    validates = bool(trainer.val_every) or (
        data.val is not None and getattr(trainer, "validate_held_out", False)
    )
    where = placement(
        trainer.device,
        options.rollout_engine,
        options.strategy,
        options.n_gpus_per_node,
        options.agent_workers,
        options.rollout_gpus_per_node,
    )
    return VerlRunSpec(
        env_id=config.env.id,
        env_kwargs=dict(config.env.kwargs),
        env_entry_point=setup.env.entry_point,
        agent=setup.agent,
        program=program,
        model_path=model_path(config.model.name),
        algorithm=algorithm.name,
        train_batch_size=rollout.tasks_per_step,
        n_samples=rollout.n,
        mini_batch_size=options.mini_batch_size or None,
        micro_batch_size_per_gpu=trainer.micro_batch_size,
        learning_rate=trainer.lr,
        critic_lr_scale=algorithm.critic_lr_scale,
        max_failure_rate=trainer.max_failure_rate,
        kl_coef=algorithm.kl_coef,
        clip_ratio=algorithm.clip_ratio,
        max_prompt_tokens=rollout.max_prompt_tokens,
        max_response_tokens=response_budget(rollout, options, program=program is not None),
        max_turns=rollout.max_turns,
        max_tokens_per_turn=rollout.max_response_tokens,
        episode_timeout_s=options.episode_timeout_s or None,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        total_steps=trainer.steps,
        # verl stops at whichever comes first; every epoch has at least one step, so `steps`
        # epochs never end a run early when the task set is smaller than steps x batch.
        total_epochs=trainer.steps,
        lora_rank=config.model.lora_rank,
        lora_alpha=config.model.lora_alpha,
        lora_target_modules=tuple(config.model.lora_target_modules),
        rollout_engine=where.rollout_engine,
        strategy=where.strategy,
        device=where.device,
        device_chosen_for_user=where.chosen_for_user,
        rollout_is=None if options.rollout_is == "off" else options.rollout_is,
        rollout_is_threshold=options.rollout_is_threshold,
        tensor_parallel_size=options.tensor_parallel_size,
        gpu_memory_utilization=options.gpu_memory_utilization,
        n_gpus_per_node=where.n_gpus_per_node,
        nnodes=options.nnodes,
        agent_workers=where.agent_workers,
        output_dir=trainer.output,
        project_name=options.project_name,
        experiment_name=config.env.id.rsplit(":", 1)[-1].replace("/", "-"),
        save_freq=trainer.save_every or -1,
        resume=trainer.resume,
        test_freq=trainer.val_every or (trainer.steps if validates else -1),
        val_env_kwargs=dict(config.env.kwargs) if validates else None,
        train_tasks=tuple(setup.training_draws()),
        val_tasks=tuple(setup.validation_draws()) if validates else None,
        loggers=loggers,
        seed=trainer.seed,
        overrides=tuple(overrides) + tuple(options.overrides),
        mode=options.mode,
        rollout_gpus_per_node=where.rollout_gpus_per_node,
        staleness=options.staleness,
        sync_every=options.sync_every,
    )
