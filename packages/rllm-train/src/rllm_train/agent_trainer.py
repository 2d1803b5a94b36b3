"""`AgentTrainer`: the Python entry point, for training from code instead of the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rllm_agents.agents.base import BaseAgent

from rllm_train.config import TrainConfig, build_config


class AgentTrainer:
    """Train `agent_class` on `env_id` with `config`.

    ``config`` is a :class:`~rllm_train.config.TrainConfig`, a path to a YAML config, or a
    mapping of dotted overrides (``{"trainer.steps": 5}``); ``env_id`` and ``env_args`` set
    ``env.id`` and ``env.kwargs``. Without ``agent_class`` the env's registered agent is used.
    """

    def __init__(
        self,
        agent_class: type[BaseAgent] | None = None,
        env_id: str | None = None,
        config: TrainConfig | str | Path | dict[str, Any] | None = None,
        *,
        agent_args: dict[str, Any] | None = None,
        env_args: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(config, TrainConfig):
            self.config = config
        elif isinstance(config, (str, Path)):
            self.config = build_config(config)
        else:
            self.config = build_config(overrides=dict(config or {}))
        if env_id is not None:
            self.config.env.id = env_id
        if env_args is not None:
            self.config.env.kwargs = dict(env_args)
        self.agent_class = agent_class
        self.agent_args = dict(agent_args or {})

    def train(self) -> list[dict[str, Any]]:
        """Run training; the native backend returns its per-step metric rows."""
        if self.config.trainer.backend == "verl":
            from rllm_train import verl as verl_backend

            verl_backend.run(self.config)
            return []
        from rllm_train.native.trainer import NativeTrainer

        trainer = NativeTrainer(
            self.config, agent_class=self.agent_class, agent_args=self.agent_args
        )
        return trainer.train()
