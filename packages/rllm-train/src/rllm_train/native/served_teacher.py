"""A distillation teacher served by an engine (``distill.engine`` other than ``local``): the
batch's sequences go to it one request each, and its log-probs come back onto the batch
exactly where the in-process teacher's forward pass puts them (docs/training/distill.md).

Each row of a :class:`~rllm_train.native.batch.TensorBatch` is asked for as the engine's
prompt log-probs (``rllm_agents.engines.scoring``): the row's token ids - exactly those the
student trained on, env and tool tokens included - up to its last generated token, scored
from its first generated token on. The values land on the generated tokens (the loss mask)
and nowhere else, as ``PolicyUpdate.scored_logprobs`` times the loss mask gives them for the
local teacher. Every row's request is in flight at once, on a loop of the teacher's own; the
engine batches them (vLLM), queues them (one model in a process or in llama.cpp) or sends
them to its server (``distill.slots`` at a time).

Which engines, and how each starts on the teacher's weights: :mod:`.teacher_engines`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from rllm_agents.engines.base import EngineError
from rllm_agents.engines.loop_thread import LoopThread

from rllm_train.native.batch import TensorBatch
from rllm_train.native.teacher_engines import SERVED_TEACHERS, TeacherSetting

CLOSE_TIMEOUT_S = 120.0  # vLLM's engine core takes seconds to stop


@dataclass(frozen=True)
class RowScoring:
    """What the teacher is asked for one row: its tokens up to its last generated one, scored
    from its first generated one (`start`) on."""

    row: int
    token_ids: list[int]
    start: int


def scoring_requests(batch: TensorBatch) -> list[RowScoring]:
    """One request per row with a generated token (pure: the batch is read, not changed)."""
    requests = []
    for row in range(len(batch)):
        generated = batch.loss_mask[row].nonzero().squeeze(-1)
        if len(generated) == 0:
            continue
        first, last = int(generated[0]), int(generated[-1])
        requests.append(RowScoring(row, batch.input_ids[row, : last + 1].tolist(), first))
    return requests


def placed_logprobs(
    batch: TensorBatch,
    requests: Sequence[RowScoring],
    answers: Sequence[Sequence[float | None]],
    engine: str,
) -> torch.Tensor:
    """The teacher's log-prob of each generated token at its position in a (batch, length)
    tensor, 0 elsewhere; an EngineError when the engine left out a generated token or answered
    another number of tokens than asked."""
    placed = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    for request, answer in zip(requests, answers, strict=True):
        expected = len(request.token_ids) - request.start
        if len(answer) != expected:
            raise EngineError(
                f"the {engine} teacher answered {len(answer)} log-probs for row {request.row}, "
                f"whose tokens {request.start}..{len(request.token_ids) - 1} were asked for"
            )
        end = len(request.token_ids)
        values = torch.tensor(
            [float("nan") if value is None else value for value in answer], dtype=torch.float32
        )
        # Only the generated tokens: the rest is context (env, tool and template tokens).
        generated = batch.loss_mask[request.row, request.start : end] > 0
        missing = (generated & values.isnan()).nonzero().squeeze(-1)
        if len(missing):
            position = request.start + int(missing[0])
            raise EngineError(
                f"the {engine} teacher gave no log-prob for generated token {position} of "
                f"row {request.row} (id {request.token_ids[position]})"
            )
        placed[request.row, request.start : end] = torch.where(generated, values, 0.0)
    return placed


class ServedTeacher:
    """The teacher's engine (started here, on the teacher's weights) and the loop its
    requests run on; :meth:`close` stops both."""

    def __init__(
        self,
        config: Any,
        source: Any,
        tokenizer: Any,
        *,
        device: torch.device,
        autocast_dtype: Any = None,
    ) -> None:
        self.engine_name = config.distill.engine
        self._loop = LoopThread("rllm-teacher")
        setting = TeacherSetting(
            config, source, tokenizer, device, autocast_dtype, run=self._loop.call
        )
        try:
            self.started = SERVED_TEACHERS[self.engine_name].start(setting)
        except BaseException:
            self._loop.stop()
            raise
        self._closed = False

    def score(self, batch: TensorBatch) -> torch.Tensor:
        """The teacher's log-prob of each token the student generated in `batch` (0 on every
        other position), on the CPU."""
        if self._closed:
            raise EngineError(f"the {self.engine_name} teacher is closed")
        requests = scoring_requests(batch)
        answers = self._loop.call(self._score_all(requests))
        return placed_logprobs(batch, requests, answers, self.engine_name)

    async def _score_all(self, requests: Sequence[RowScoring]) -> list[list[float | None]]:
        engine = self.started.engine
        return list(
            await asyncio.gather(
                *(engine.prompt_logprobs(request.token_ids, request.start) for request in requests)
            )
        )

    def close(self) -> None:
        """Stop the engine (its child processes, servers and files) and the loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.call(self.started.engine.aclose(), timeout=CLOSE_TIMEOUT_S)
        finally:
            try:
                self.started.cleanup()
            finally:
                self._loop.stop()
