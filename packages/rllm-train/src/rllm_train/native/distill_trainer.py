"""The native trainer with a teacher: on-policy distillation (``--algorithm distill``, or any RL
algorithm with ``distill.teacher``; docs/training/distill.md).

A step is the RL step: the student plays its episodes, they become the batch of training
sequences, and the policy is updated. Before the update the teacher scores the batch, and its
log-prob of every token the student generated rides on the batch
(``TensorBatch.teacher_logprobs``); the update adds ``distill.weight * (log p_teacher -
log p_student)`` to each such token's advantage (:mod:`.distill`). The teacher sees the whole
sequence - prompt, env observations, tool results, earlier turns - as context, but only the
student's own tokens (the batch's loss mask) are scored.

What scores is ``distill.engine``: ``local`` - the teacher frozen on the trainer's device
(:mod:`.teacher`), one forward pass per micro-batch - or an engine started with the trainer
and closed with it (:mod:`.served_teacher`: a child process, vLLM, llama.cpp, or an
OpenAI-compatible server), asked for each row's prompt log-probs.

Each row adds ``distill/kl`` (the mean per-token reverse KL to the teacher over the scored
tokens, estimated from the student's samples), ``distill/teacher_logprob_mean``,
``distill/tokens`` and ``time/teacher_s`` (the teacher's scoring, inside ``time/update_s``).
"""

from __future__ import annotations

import time
from typing import Any

from rllm_train.config import TrainConfig
from rllm_train.config.distill import LOCAL
from rllm_train.native.batch import TensorBatch
from rllm_train.native.teacher import check_same_tokenizer, load_teacher, teacher_source
from rllm_train.native.trainer import NativeTrainer


class DistillTrainer(NativeTrainer):
    """The RL trainer whose update also learns from a teacher (see the module doc)."""

    def __init__(self, config: TrainConfig, **kwargs: Any) -> None:
        from rllm_train.native.teacher_engines import check_teacher_engine

        super().__init__(config, **kwargs)
        self.teacher_source = teacher_source(config.distill.teacher)
        # Before the teacher's weights load: a teacher of another vocabulary is refused.
        check_same_tokenizer(self.tokenizer, self.teacher_source)
        check_teacher_engine(config, self.teacher_source)
        self.teacher = None  # the local teacher's model
        self._served = None  # a served teacher's engine (served_teacher.ServedTeacher)
        if config.distill.engine == LOCAL:
            self.teacher = load_teacher(self.teacher_source, self.device)
        else:
            # Started now, so that what cannot start stops the run before its first step.
            self._served = self._serve_teacher()

    def _serve_teacher(self):
        from rllm_train.native.served_teacher import ServedTeacher

        return ServedTeacher(
            self.config,
            self.teacher_source,
            self.tokenizer,
            device=self.device,
            autocast_dtype=self.autocast_dtype,
        )

    @property
    def served_teacher(self):
        """The served teacher (None with the local one); started again after a close()."""
        if self._served is None and self.config.distill.engine != LOCAL:
            self._served = self._serve_teacher()
        return self._served

    def teacher_logprobs(self, batch: TensorBatch):
        """The teacher's log-prob of each token the student generated in `batch` (0 on every
        other position), on the CPU."""
        if self.served_teacher is not None:
            return self.served_teacher.score(batch)
        scored = self.policy_update.scored_logprobs(batch, 1.0, model=self.teacher)
        return scored * batch.loss_mask

    def update(self, batch: TensorBatch) -> dict[str, float]:
        started = time.perf_counter()
        batch.teacher_logprobs = self.teacher_logprobs(batch)
        teacher_seconds = time.perf_counter() - started
        return {**super().update(batch), "time/teacher_s": teacher_seconds}

    def train(self) -> list[dict[str, Any]]:
        try:
            return super().train()
        finally:
            self.close()  # also when the run stops before its steps (a resume that fails)

    def close(self) -> None:
        """The samplers' engines and the served teacher stop (a later step starts them again)."""
        try:
            super().close()
        finally:
            served, self._served = self._served, None
            if served is not None:
                served.close()
