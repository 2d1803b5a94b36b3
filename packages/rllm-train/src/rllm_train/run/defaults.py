"""The defaults a run works out once it is set up, from the run itself: the env's own turn limit
(``rollout.max_turns=0``), the fastest engine that can play it (``rollout.engine=auto``) and the
method's own learning rate (``trainer.lr=0``). :func:`rllm_train.run.setup.setup_run` applies
them, so both backends see the same values and the config a run saves says what it used.
"""

from __future__ import annotations

from rllm_train.config import ConfigError, TrainConfig
from rllm_train.run.algorithm import algorithm
from rllm_train.run.specs import EnvSpec


def resolve_max_turns(config: TrainConfig, env: EnvSpec, multiagent: bool) -> None:
    """``rollout.max_turns=0`` (the default) becomes the env's own turn limit, read off one env
    made with the run's arguments (FrozenLake: the most its lakes allow; 8 where an env states
    none), so the config a run saves says how many turns it played. A game counts parallel
    steps in ``multiagent.max_cycles`` instead, so its turns stay at 1."""
    rollout = config.rollout
    if rollout.max_turns:
        return
    if multiagent:
        rollout.max_turns = 1
        return
    from rllm_envs.core.turn_limit import default_turns

    if env.env_class() is None:
        from rllm_train.envs import check_env

        check_env(config.env.id, config.env.kwargs)  # an unknown id or keyword, named as such
    try:
        made = env.make()
    except Exception as error:  # noqa: BLE001 - whatever the env refuses, the user must read
        raise ConfigError(f"env.kwargs: cannot make {env.env_id!r}: {error}") from error
    try:
        rollout.max_turns = default_turns(made)
    finally:
        made.close()
    from rllm_train.config.tree import tree_problems

    problems = tree_problems(config)  # branch turns against the limit now known
    if problems:
        raise ConfigError("; ".join(problems))


def resolve_engine(config: TrainConfig, backend: str, multiagent: bool) -> None:
    """``rollout.engine=auto`` (the default) becomes llamacpp where llama.cpp can play the run
    - the embedded model (the one GGUF it serves) on a CPU, the native backend, BaseAgent
    episodes played inline, no tree rollouts - and local everywhere else. On 2 cores llama.cpp
    raised the main job's held-out gain per minute 1.2-1.4x (docs/training/native.md); the config a run
    saves names the engine it used."""
    import importlib.util

    rollout = config.rollout
    if rollout.engine != "auto":
        return
    import torch

    from rllm_train.native.engine_apart import LLAMACPP_MODEL

    plain_run = algorithm(config.algorithm.name).plays_tasks and not (
        multiagent or config.program.given or rollout.executor != "inline" or rollout.tree.enabled
    )
    llamacpp = (
        backend == "native"
        and plain_run
        and config.model.name == LLAMACPP_MODEL
        and on_cpu(config.trainer.device, torch.cuda.is_available())
        and importlib.util.find_spec("llama_cpp") is not None
    )
    rollout.engine = "llamacpp" if llamacpp else "local"


def on_cpu(device: str, cuda_available: bool) -> bool:
    """Whether ``trainer.device`` puts the run on the CPU (auto: where no GPU is visible)."""
    return device == "cpu" or (device == "auto" and not cuda_available)


# The learning rate each method trains well at when none is given: a LoRA's adapters start at
# zero and need far larger steps than the weights of a fully fine-tuned model.
LORA_LR, FULL_LR = 1e-3, 2e-5


def resolve_lr(config: TrainConfig) -> None:
    """``trainer.lr=0`` (the default) becomes the method's own rate (LORA_LR or FULL_LR)."""
    if not config.trainer.lr:
        config.trainer.lr = LORA_LR if config.model.lora_rank > 0 else FULL_LR
