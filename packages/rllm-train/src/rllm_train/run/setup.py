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
from rllm_train.config.validation import check_engine_replicas
from rllm_train.datasets import RunData, run_data
from rllm_train.run.algorithm import Algorithm, algorithm
from rllm_train.run.curriculum import Curriculum, curriculum_for_run
from rllm_train.run.defaults import resolve_engine, resolve_lr, resolve_max_turns
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
    given_engine = config.rollout.engine
    resolve_engine(config, backend, multiagent)  # before the refusals, which read them
    resolve_lr(config)
    refused = refusals(config, backend)
    if refused:
        raise ConfigError("; ".join(refused))
    check_engine_replicas(config, given_engine)  # auto may have become the trained model
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
