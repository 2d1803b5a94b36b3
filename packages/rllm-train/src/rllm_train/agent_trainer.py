"""`AgentTrainer`: the Python entry point, for training from code instead of the CLI.

Takes rLLM's documented form - ``AgentTrainer(agent_class=..., env_class=..., config=...,
train_dataset=..., val_dataset=..., agent_args=..., env_args=...)`` - on either backend:

* ``config``: our :class:`~rllm_train.config.TrainConfig`, a YAML path, a mapping of dotted
  overrides, or the DictConfig of a ``@hydra.main(config_path="pkg://rllm_train.config",
  config_name="agent_trainer")`` entry point (``ppo_trainer`` names the same defaults).
* ``env_class``: a registered env id, or a ``gymnasium.Env`` class made as
  ``env_class(**env_args)`` (recorded as ``env.entry_point``).
* ``train_dataset`` / ``val_dataset``: a TaskSet (``DatasetRegistry.load_dataset(...)``), a list
  of rows, or a ``"name:split"`` / file spec. Rows are written to ``<output>/data/`` and named
  in ``data.train`` / ``data.val``, so both backends (and a resumed run) read them from the
  config alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rllm_agents.agents.base import BaseAgent

from rllm_train.config import TrainConfig, build_config, from_mapping
from rllm_train.run.backends import backend_module
from rllm_train.run.setup import RunSetup, setup_run
from rllm_train.run.specs import import_path

Dataset = str | Path | Iterable[Mapping[str, Any]]


def _config_of(config: Any) -> TrainConfig:
    if isinstance(config, TrainConfig):
        return config
    if isinstance(config, (str, Path)):
        return build_config(config)
    if config is None:
        return build_config()
    if isinstance(config, dict) and all("." in key for key in config):
        return build_config(overrides=dict(config))  # {"trainer.steps": 5}
    return from_mapping(config)  # sections: a dict of dicts or a Hydra DictConfig


def dataset_spec(dataset: Dataset, output: Path, split: str) -> str:
    """A spec for data.train / data.val: names and paths as given, rows written to a file."""
    if isinstance(dataset, (str, Path)):
        return str(dataset)
    path = output / "data" / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = "".join(json.dumps(dict(row), ensure_ascii=False) + "\n" for row in dataset)
    path.write_text(rows, encoding="utf-8")
    return str(path)


def json_arguments(arguments: Mapping[str, Any]) -> bool:
    try:
        json.dumps(dict(arguments))
    except (TypeError, ValueError):
        return False
    return True


class AgentTrainer:
    """Train `agent_class` on `env_class` (see the module docstring)."""

    def __init__(
        self,
        agent_class: type[BaseAgent] | None = None,
        env_class: type | str | None = None,
        config: Any = None,
        train_dataset: Dataset | None = None,
        val_dataset: Dataset | None = None,
        agent_args: dict[str, Any] | None = None,
        env_args: dict[str, Any] | None = None,
        *,
        env_id: str | None = None,
    ) -> None:
        self.config = _config_of(config)
        env = env_class if env_class is not None else env_id
        self.env_class = env if isinstance(env, type) else None
        if isinstance(env, type):
            self.config.env.entry_point = import_path(env)
        elif env is not None:
            self.config.env.id = env
        if env_args is not None:
            self.config.env.kwargs = dict(env_args)
        output = Path(self.config.trainer.output)
        if train_dataset is not None:
            self.config.data.train = dataset_spec(train_dataset, output, "train")
        if val_dataset is not None:
            self.config.data.val = dataset_spec(val_dataset, output, "val")
        self.agent_class = agent_class
        # Recorded in the config (config.yaml, and verl's data rows) where they are plain
        # values; arguments that are not (objects) reach the native trainer's agent only.
        self.agent_args = dict(agent_args or {})
        if agent_class is not None:
            self.config.env.agent = import_path(agent_class)
        if json_arguments(self.agent_args):
            self.config.env.agent_args = {**self.config.env.agent_args, **self.agent_args}
            self.agent_args = {}

    def setup(self) -> RunSetup:
        """The run, worked out from the config and the classes given here (checked)."""
        return setup_run(
            self.config,
            agent_class=self.agent_class,
            agent_args=self.agent_args,
            env_class=self.env_class,
        )

    def train(self) -> list[dict[str, Any]]:
        """Run training; returns the run's metric rows (``val/*`` included), on both backends."""
        setup = self.setup()
        backend = backend_module(self.config.trainer.backend)
        backend.check(setup)
        return backend.train(setup)

    def dry_run(self) -> str:
        """What the backend would run, checked and printed, nothing slow started (the verl
        backend: the composed verl trainer config and data layout)."""
        setup = self.setup()
        return backend_module(self.config.trainer.backend).dry_run(setup)
