"""rllm-train: RL training of language agents on any Gymnasium-registered environment.

``rllm-train`` (:mod:`rllm_train.cli`) and :class:`AgentTrainer` run the same config on the
native backend (:mod:`rllm_train.native`, CPU or one GPU) or the verl backend
(:mod:`rllm_train.verl`, GPU clusters); what the two share is worked out once, in
:mod:`rllm_train.run` (docs/training/architecture.md).
"""

from rllm_train.agent_trainer import AgentTrainer
from rllm_train.config import ConfigError, TrainConfig, build_config

__all__ = ["AgentTrainer", "ConfigError", "TrainConfig", "build_config"]
