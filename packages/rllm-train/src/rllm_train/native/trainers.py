"""Which native trainer runs an algorithm: the RL loop, or fine-tuning on recorded episodes."""

from __future__ import annotations

from rllm_train.config import TrainConfig
from rllm_train.native.trainer import NativeTrainer
from rllm_train.run.algorithm import algorithm


def trainer_class(config: TrainConfig) -> type[NativeTrainer]:
    """The RL trainer, or for an algorithm that plays no tasks (SFT) the fine-tuning one."""
    if algorithm(config.algorithm.name).plays_tasks:
        return NativeTrainer
    from rllm_train.native.sft import SFTTrainer  # it subclasses the RL trainer

    return SFTTrainer
