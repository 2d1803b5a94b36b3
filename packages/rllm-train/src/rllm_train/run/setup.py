"""`RunSetup`: what a run is, worked out once from its config, handed to either backend.

``rllm-train`` and ``AgentTrainer`` build it before the run folder is claimed, so whatever it
refuses leaves nothing behind; the backend then trains from it. Building it checks the config
against the backend's refusals (:mod:`~rllm_train.run.refusals`), loads the task rows, resolves
the agent (class and arguments) and the env, and loads an agent program if one plays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rllm_train.config import ConfigError, TrainConfig
from rllm_train.datasets import RunData, run_data
from rllm_train.run.algorithm import Algorithm, algorithm
from rllm_train.run.curriculum import Curriculum, curriculum_for_run
from rllm_train.run.refusals import refusals
from rllm_train.run.specs import AgentSpec, EnvSpec, agent_spec, env_spec, program_for_run
from rllm_train.run.tasks import TaskDraw, training_draws, validation_draws, validation_seeds


def is_multiagent(env_id: str) -> bool:
    """Whether `env_id` names a PettingZoo-style multi-agent env module (not a Gymnasium id)."""
    from rllm_agents.cli.eval_multiagent import multiagent_env_module

    return multiagent_env_module(env_id) is not None


@dataclass(frozen=True)
class RunSetup:
    """One run's config and everything both backends derive from it the same way."""

    config: TrainConfig
    backend: str
    algorithm: Algorithm
    env: EnvSpec
    agent: AgentSpec
    data: RunData  # the task rows (none for a multi-agent game: its tasks are seeds)
    multiagent: bool
    program: Any = None  # the agent program that plays instead of the agent (None: the agent)

    def curriculum(self) -> Curriculum:
        """A fresh curriculum for the run: it keeps state, so each trainer makes its own."""
        config = self.config
        return curriculum_for_run(
            config,
            self.data,
            multiagent=self.multiagent,
            validation_seeds=validation_seeds(config.trainer.seed, config.trainer.val_tasks),
        )

    def training_draws(self) -> list[TaskDraw]:
        """Every step's tasks, in the order they are played (the uniform plan)."""
        return training_draws(self.curriculum(), self.config.trainer.steps)

    def validation_draws(self) -> list[TaskDraw]:
        trainer = self.config.trainer
        return validation_draws(trainer.seed, trainer.val_tasks, self.data)


def setup_run(
    config: TrainConfig,
    *,
    backend: str | None = None,
    agent_class: type | None = None,
    agent_args: Mapping[str, Any] | None = None,
    env_class: type | None = None,
) -> RunSetup:
    """The run `config` describes, on `backend` (default ``trainer.backend``); a ConfigError
    names what is wrong or what that backend cannot honour."""
    backend = backend or config.trainer.backend
    multiagent = is_multiagent(config.env.id)
    resolve_engine(config, backend, multiagent)
    resolve_lr(config)
    refused = refusals(config, backend)
    if refused:
        raise ConfigError("; ".join(refused))
    data = RunData() if multiagent else run_data(config)
    env = env_spec(config.env, env_class)
    resolve_max_turns(config, env, multiagent)
    return RunSetup(
        config=config,
        backend=backend,
        algorithm=algorithm(config.algorithm.name),
        env=env,
        agent=agent_spec(config.env, agent_class, agent_args),
        data=data,
        multiagent=multiagent,
        program=program_for_run(config, multiagent, data.train),
    )


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
    doubled the main job's held-out gain per minute (docs/training/native.md); the config a run
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
