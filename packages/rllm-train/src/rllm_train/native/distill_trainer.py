"""The native trainer with a teacher: on-policy distillation (``--algorithm distill``, or any RL
algorithm with ``distill.teacher``; docs/training/distill.md).

A step is the RL step: the student plays its episodes, they become the batch of training
sequences, and the policy is updated. Before the update the teacher - frozen, on the trainer's
device (:mod:`.teacher`) - scores the batch in one forward pass per micro-batch, and its
log-prob of every token the student generated rides on the batch
(``TensorBatch.teacher_logprobs``); the update adds ``distill.weight * (log p_teacher -
log p_student)`` to each such token's advantage (:mod:`.distill`). The teacher sees the whole
sequence - prompt, env observations, tool results, earlier turns - as context, but only the
student's own tokens (the batch's loss mask) are scored.

Each row adds ``distill/kl`` (the mean per-token reverse KL to the teacher over the scored
tokens, estimated from the student's samples), ``distill/teacher_logprob_mean``,
``distill/tokens`` and ``time/teacher_s`` (the teacher's scoring, inside ``time/update_s``).
"""

from __future__ import annotations

import time
from typing import Any

from rllm_train.config import TrainConfig
from rllm_train.native.batch import TensorBatch
from rllm_train.native.teacher import check_same_tokenizer, load_teacher, teacher_source
from rllm_train.native.trainer import NativeTrainer


class DistillTrainer(NativeTrainer):
    """The RL trainer whose update also learns from a teacher (see the module doc)."""

    def __init__(self, config: TrainConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.teacher_source = teacher_source(config.distill.teacher)
        # Before the teacher's weights load: a teacher of another vocabulary is refused.
        check_same_tokenizer(self.tokenizer, self.teacher_source)
        self.teacher = load_teacher(self.teacher_source, self.device)

    def teacher_logprobs(self, batch: TensorBatch):
        """The teacher's log-prob of each token the student generated in `batch` (0 on every
        other position), on the CPU."""
        scored = self.policy_update.scored_logprobs(batch, 1.0, model=self.teacher)
        return scored * batch.loss_mask

    def update(self, batch: TensorBatch) -> dict[str, float]:
        started = time.perf_counter()
        batch.teacher_logprobs = self.teacher_logprobs(batch)
        teacher_seconds = time.perf_counter() - started
        return {**super().update(batch), "time/teacher_s": teacher_seconds}
