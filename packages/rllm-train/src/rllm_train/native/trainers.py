"""Which native trainer runs a config: the RL loop, fine-tuning on recorded episodes, or the RL
loop with a teacher (on-policy distillation)."""

from __future__ import annotations

from collections.abc import Callable

from rllm_envs.core.loading import load_attr

from rllm_train.config import TrainConfig
from rllm_train.native.trainer import NativeTrainer
from rllm_train.run.algorithm import algorithm

# The first row whose test holds picks the trainer (import path: the others subclass the RL
# trainer, and load only when picked); none: the RL trainer.
TRAINERS: tuple[tuple[Callable[[TrainConfig], bool], str], ...] = (
    (
        lambda config: not algorithm(config.algorithm.name).plays_tasks,
        "rllm_train.native.sft:SFTTrainer",
    ),
    (lambda config: config.distill.on, "rllm_train.native.distill_trainer:DistillTrainer"),
)


def trainer_class(config: TrainConfig) -> type[NativeTrainer]:
    """The trainer class for `config` (see :data:`TRAINERS`)."""
    for picks, path in TRAINERS:
        if picks(config):
            return load_attr(path, "the native trainer")
    return NativeTrainer
