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
            self.config.env.entry_point = f"{env.__module__}:{env.__qualname__}"
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
        self.agent_args = dict(agent_args or {})
        if agent_class is not None and self.config.trainer.backend == "verl":
            # verl's workers build the agent from its import path (agent_args not yet carried)
            self.config.env.agent = f"{agent_class.__module__}:{agent_class.__qualname__}"

    def train(self) -> list[dict[str, Any]]:
        """Run training; returns the run's metric rows (``val/*`` included), on both backends."""
        if self.config.trainer.backend == "verl":
            from pathlib import Path

            from rllm_train import verl as verl_backend
            from rllm_train.native.reporting import METRICS_FILE, read_metrics

            verl_backend.run(self.config)
            return read_metrics(Path(self.config.trainer.output) / METRICS_FILE)
        from rllm_train.native.trainers import trainer_class

        env_factory = None
        if self.env_class is not None:  # made from the class itself: it may live in __main__
            arguments = dict(self.config.env.kwargs)
            env_factory = lambda: self.env_class(**arguments)  # noqa: E731
        trainer = trainer_class(self.config)(
            self.config,
            agent_class=self.agent_class,
            agent_args=self.agent_args,
            env_factory=env_factory,
        )
        return trainer.train()

    def dry_run(self) -> str:
        """What the backend would run, checked and printed, nothing slow started (the verl
        backend: the composed verl trainer config and data layout)."""
        if self.config.trainer.backend == "verl":
            from rllm_train import verl as verl_backend

            return verl_backend.dry_run(self.config)
        import yaml

        return yaml.safe_dump(self.config.to_dict(), sort_keys=False)
