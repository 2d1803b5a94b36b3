"""Which native trainer runs an algorithm: the RL loop, or fine-tuning on recorded episodes."""

from __future__ import annotations

from rllm_train.config import TrainConfig
from rllm_train.native.trainer import NativeTrainer


def trainer_class(config: TrainConfig) -> type[NativeTrainer]:
    # Imported here: the fine-tuning trainer subclasses the RL one.
    from rllm_train.native.sft import SFTTrainer

    special: dict[str, type[NativeTrainer]] = {"sft": SFTTrainer}
    return special.get(config.algorithm.name, NativeTrainer)
