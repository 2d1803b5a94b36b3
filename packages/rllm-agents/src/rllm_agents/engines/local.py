"""A local transformers engine that batches concurrent requests (CPU or CUDA).

Continuous batching: concurrent ``generate`` calls go to a queue, and one worker thread keeps a
running batch (:mod:`rllm_agents.engines.running_batch`) of up to ``max_batch_size`` sequences
over one padded KV cache. Between decode steps it admits waiting requests (their prompts are
prefilled together and their caches joined to the batch) and retires finished ones, so a
request never waits for a whole batch to drain and a short answer never holds its slot until
the longest one is done. N agents waiting on the model cost about one forward pass per token,
not N. When the worker is idle it waits ``batch_wait_s`` after the first request so that a
burst of requests starts as one prefill.

Cancellation: a request whose caller gave up (its task was cancelled, e.g. by a trajectory
timeout) leaves the batch at the next step and frees its slot.

Logprobs: each returned logprob is ``log_softmax(logits / temperature)`` at the sampled token,
i.e. under the temperature-scaled distribution *before* top-p truncation (the distribution a
policy-gradient trainer scores with). With ``temperature == 0`` (greedy) it is the plain
``log_softmax(logits)``.

Completion ids include the EOS token or the tokens that completed a stop string (the model
generated them and a trainer must learn them); the text leaves both out.

``update_weights`` swaps weights between sequences: it stops admitting requests, waits for the
running ones to finish, loads the weights, and admission resumes - no sequence mixes policies.

``generate_together`` hands the engine a whole round of requests at once (a lockstep
scheduler's turn): they are admitted together, in the order given, with no wait for stragglers,
so the batch - and with it every floating-point result - is the same each time the same round
is played.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rllm_agents.engines import running_batch, scoring
from rllm_agents.engines.base import ContextOverflow, EngineError, ModelOutput, SamplingParams
from rllm_agents.engines.local_requests import (
    _STOP_WORKER,
    BatchStats,
    _Request,
    _requests_of,
    _resolve,
    _Round,
    _RowState,
)
from rllm_agents.engines.prompting import prompt_ids_for
from rllm_agents.engines.running_batch import RunningBatch
from rllm_agents.engines.sampling import sample_next


class LocalEngine:
    """RolloutEngine over an in-process Hugging Face causal LM (or a model that brings its own
    batch operations, such as ``llamacpp_batch.LlamaCppModel``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: str = "cpu",
        max_batch_size: int = 32,
        batch_wait_s: float = 0.05,
        dtype: Any = None,
        seed: int = 0,
        autocast_dtype: Any = None,
        cpu_threads: int | None = None,
    ) -> None:
        from rllm_agents.models import load_model, load_tokenizer

        if isinstance(model, str) or hasattr(model, "__fspath__"):
            tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
            model = load_model(model, device=device, dtype=dtype)
        if tokenizer is None:
            raise ValueError("LocalEngine needs a tokenizer when given a model object")
        import torch

        self.model = model.to(device).eval()
        # How batches run on this model: transformers' KV cache (running_batch), unless the
        # model brings its own (llama.cpp's sequences, engines/llamacpp/batch.py).
        self._ops: Any = getattr(self.model, "batch_ops", running_batch)
        # Such a model may run fewer rows at once (llama.cpp's sequence ids): the rest wait.
        self.max_batch_size = min(max_batch_size, getattr(self._ops, "max_rows", max_batch_size))
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.batch_wait_s = batch_wait_s
        # Sampling under autocast (e.g. bfloat16 on a GPU, as a trainer trains): autocast is
        # per thread, so the worker enters it itself.
        self.autocast_dtype = autocast_dtype
        # Intra-op threads of the worker on a CPU (None: torch's default, every core). A
        # thread's own setting: an engine beside a trainer in the same process can leave it
        # cores instead of both spinning on all of them.
        self.cpu_threads = cpu_threads
        self.stats = BatchStats()
        self._eos_ids = self._collect_eos_ids()
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # Tokens of prompt and completion together (None: unbounded); a gateway in front of
        # the engine refuses a max_tokens beyond it.
        self.context_length = getattr(model.config, "max_position_embeddings", None)
        self._default_generator = torch.Generator(device=self.device).manual_seed(seed)
        self._requests: queue.Queue = queue.Queue()
        # Weight swaps wait for a moment with no running sequence (see update_weights).
        self._swap = threading.Condition()
        self._pending_swaps = 0
        self._decoding = False
        self._busy_since = 0.0
        self._worker: threading.Thread | None = None
        self._closed = False
        # Set by update_weights; stamped on every output. None: not tracked here (an engine
        # serving a model that its owner updates in place, such as a trainer's).
        self.policy_version: int | None = 0

    @classmethod
    def from_name(cls, name_or_path: str, **kwargs: Any) -> LocalEngine:
        """An engine for an embedded model ("tiny", "smollm2") or a local HF directory."""
        return cls(name_or_path, **kwargs)

    def _collect_eos_ids(self) -> set[int]:
        ids = set()
        for source in (self.tokenizer.eos_token_id, self.model.generation_config.eos_token_id):
            if source is None:
                continue
            ids.update(source if isinstance(source, list) else [source])
        return ids

    # ---- public API -------------------------------------------------------------------------

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        request = self._request(messages, prompt_ids, sampling, tools)
        self._ensure_worker()
        self._requests.put(request)
        return await request.future

    async def generate_together(
        self, calls: Sequence[Mapping[str, Any]]
    ) -> list[ModelOutput | Exception]:
        """Several ``generate`` calls admitted as one group, in order (one item per call).

        Each item of `calls` holds one call's keyword arguments (``messages`` or
        ``prompt_ids``, ``sampling``, ``tools``). The answers come back in the same order, a
        call that failed as its exception, as ``asyncio.gather(..., return_exceptions=True)``
        gives them. The group starts decoding as soon as it arrives and none of its rows waits
        for requests outside it, so the same group always runs as the same batch.
        """
        requests: list[_Request] = []
        answers: list[Any] = []
        for call in calls:
            try:
                request = self._request(
                    call.get("messages"),
                    call.get("prompt_ids"),
                    call.get("sampling"),
                    call.get("tools"),
                )
            except Exception as exc:  # noqa: BLE001 - this call fails alone
                answers.append(exc)
                continue
            requests.append(request)
            answers.append(request.future)
        if requests:
            self._ensure_worker()
            self._requests.put(_Round(tuple(requests)))
        results = await asyncio.gather(
            *(answer for answer in answers if isinstance(answer, asyncio.Future)),
            return_exceptions=True,
        )
        ordered = iter(results)
        return [next(ordered) if isinstance(a, asyncio.Future) else a for a in answers]

    def _request(
        self,
        messages: list[dict[str, Any]] | None,
        prompt_ids: list[int] | None,
        sampling: SamplingParams | None,
        tools: list[dict[str, Any]] | None,
    ) -> _Request:
        """A checked request with its future on the running loop (not yet queued)."""
        if self._closed:
            raise EngineError("LocalEngine is closed")
        ids = prompt_ids_for(self.tokenizer, messages, prompt_ids, tools)
        if not ids:
            raise ValueError("the prompt is empty")
        if self.context_length is not None and len(ids) >= self.context_length:
            raise ContextOverflow(
                f"prompt of {len(ids)} tokens does not fit the model context "
                f"({self.context_length} tokens)"
            )
        loop = asyncio.get_running_loop()
        return _Request(ids, sampling or SamplingParams(), loop.create_future(), loop)

    def update_weights(self, state_dict_or_model: Any, *, version: int | None = None) -> None:
        """Load new weights (a state dict or a model with the same architecture).

        Blocks until every running sequence has finished (none is admitted meanwhile), so each
        completion comes from one policy: the one `version` names (one more than before when
        not given).
        """
        state_dict = (
            state_dict_or_model.state_dict()
            if hasattr(state_dict_or_model, "state_dict")
            else state_dict_or_model
        )
        with self._between_batches():
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            self.policy_version = (self.policy_version or 0) + 1 if version is None else version
        # Tied embeddings may legitimately be absent; any other mismatch is a real error.
        missing = [k for k in missing if k not in tied_keys(self.model)]
        if missing or unexpected:
            raise ValueError(
                f"update_weights: state dict does not match the model "
                f"(missing {missing[:5]}, unexpected {list(unexpected)[:5]})"
            )

    async def prompt_logprobs(self, token_ids: Sequence[int], start: int = 1) -> list[float]:
        """The model's log-prob of each given token from `start` on (engines/scoring.py): one
        forward pass, taken between two decoding steps as a weight swap is (the model serves
        one or the other at a time). A model that brings its own batch operations scores with
        them (llama.cpp: engines/llamacpp/scoring.py)."""
        if self._closed:
            raise EngineError("LocalEngine is closed")
        ids = scoring.checked_request(token_ids, start, self.context_length)
        return await asyncio.to_thread(self._score, ids, start)

    def _score(self, ids: list[int], start: int) -> list[float]:
        with self._between_batches():
            own = getattr(self._ops, "prompt_logprobs", None)
            if own is not None:
                return own(ids, start)
            return scoring.transformers_prompt_logprobs(
                self.model, ids, start, self.device, self.autocast_dtype
            )

    @contextlib.contextmanager
    def _between_batches(self) -> Iterator[None]:
        """Hold the model while no sequence decodes: the worker admits no request meanwhile,
        and this waits for the running ones to finish first."""
        with self._swap:
            self._pending_swaps += 1  # the worker stops admitting requests from here on
            try:
                while self._decoding:
                    self._swap.wait()
                yield
            finally:
                self._pending_swaps -= 1
                self._swap.notify_all()

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._requests.put(_STOP_WORKER)
            self._worker.join(timeout=60)
            self._worker = None
        # A model whose batches run outside torch (llama.cpp) owns memory torch does not free.
        release_model = getattr(self._ops, "close", None)
        if release_model is not None:
            release_model()

    # ---- worker -----------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(
                target=self._serve, name="rllm-local-engine", daemon=True
            )
            self._worker.start()

    def _serve(self) -> None:
        import torch

        if self.cpu_threads:
            torch.set_num_threads(self.cpu_threads)  # this thread's, not the process's
        autocast = (
            torch.autocast(self.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        # No autograd on the sampling path: the model may be a trainer's, with grads enabled.
        with torch.inference_mode(), autocast:
            self._serve_requests()

    def _serve_requests(self) -> None:
        waiting: list[_Request] = []
        batch: RunningBatch | None = None
        while True:
            stop = self._collect(waiting, idle=batch is None)
            if stop:
                break
            self._busy_since = time.perf_counter()
            try:
                batch = self._admit(batch, waiting)
                batch = self._retire(batch)
                if batch is not None:
                    self._decode_step(batch)
                    batch = self._retire(batch)
            except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                error = EngineError(f"local generation failed: {type(exc).__name__}: {exc}")
                for row in batch.rows if batch is not None else []:
                    _resolve(row.request, exception=error)
                if batch is not None:
                    self._ops.release(batch)
                batch = None
            self._count_busy_time()
            if batch is None:
                self._set_decoding(False)
        # Closing ends everything in flight with a clear error instead of a hang.
        closed = EngineError("LocalEngine is closed")
        for request in [row.request for row in batch.rows] if batch is not None else []:
            _resolve(request, exception=closed)
        for request in waiting:
            _resolve(request, exception=closed)
        while not self._requests.empty():
            item = self._requests.get_nowait()
            for request in _requests_of(item):
                _resolve(request, exception=closed)
        self._set_decoding(False)

    def _collect(self, waiting: list[_Request], *, idle: bool) -> bool:
        """Move queued requests to `waiting`; True when the engine is closing.

        Idle with nothing waiting, block for one request, then gather what else arrives within
        ``batch_wait_s`` so a burst starts as one prefill; a round (``generate_together``) is a
        complete burst already and starts at once. Otherwise never block.
        """
        if idle and not waiting:
            first = self._requests.get()
            if first is _STOP_WORKER:
                return True
            waiting.extend(_requests_of(first))
            deadline = time.monotonic() + self.batch_wait_s
            while len(waiting) < self.max_batch_size and not isinstance(first, _Round):
                try:
                    item = self._requests.get(timeout=max(deadline - time.monotonic(), 0))
                except queue.Empty:
                    break
                if item is _STOP_WORKER:
                    return True
                waiting.extend(_requests_of(item))
            return False
        while True:
            try:
                item = self._requests.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP_WORKER:
                return True
            waiting.extend(_requests_of(item))

    def _admit(self, batch: RunningBatch | None, waiting: list[_Request]) -> RunningBatch | None:
        """Prefill as many waiting requests as fit and join them to the running batch."""
        live = [r for r in waiting if not r.abandoned]
        self.stats.cancelled += len(waiting) - len(live)
        waiting[:] = live
        if not waiting:
            return batch
        if batch is not None and (not batch.compactable or self._pending_swaps):
            return batch  # static fallback, or a weight swap waits for the batch to drain
        room = self.max_batch_size - (batch.size if batch is not None else 0)
        if room <= 0:
            return batch
        if batch is None:
            self._set_decoding(True)
        chosen, waiting[:] = waiting[:room], waiting[room:]
        try:
            cache, attention, logits, compactable = self._ops.prefill(
                self.model, [r.prompt_ids for r in chosen], self._pad_id, self.device
            )
            rows = [
                _RowState(r, self._token_budget(r), generator=self._generator_for(r.sampling))
                for r in chosen
            ]
            joined = RunningBatch(rows, cache, attention, pending=None, compactable=compactable)
            self._sample_into(joined, logits)
        except Exception as exc:  # noqa: BLE001 - only these requests fail; the batch goes on
            error = EngineError(f"local generation failed: {type(exc).__name__}: {exc}")
            for request in chosen:
                _resolve(request, exception=error)
            return batch
        self.stats.requests += len(chosen)
        self.stats.batches += 1
        self.stats.forward_passes += 1
        self.stats.batch_sizes.append(len(chosen))
        if batch is None:
            return joined
        try:
            return self._ops.merge(batch, joined)
        except Exception as exc:
            error = EngineError(f"local generation failed: {type(exc).__name__}: {exc}")
            for request in chosen:
                _resolve(request, exception=error)
            raise  # the running batch's cache may be half merged: it fails as well

    def _decode_step(self, batch: RunningBatch) -> None:
        logits = self._ops.decode(self.model, batch)
        self.stats.forward_passes += 1
        self.stats.decode_passes += 1
        self.stats.decoded_rows += batch.size
        self._sample_into(batch, logits)

    def _sample_into(self, batch: RunningBatch, logits: Any) -> None:
        """Sample the next token of every unfinished row; it becomes the row's pending token."""
        import torch

        live = [i for i, row in enumerate(batch.rows) if row.finish_reason is None]
        pending = [self._pad_id] * batch.size  # finished rows (static fallback) feed padding
        if live:
            rows = [batch.rows[i] for i in live]
            index = torch.tensor(live, dtype=torch.long, device=logits.device)
            tokens, logprobs = sample_next(
                logits.index_select(0, index) if len(live) < batch.size else logits,
                [row.request.sampling for row in rows],
                [row.generator for row in rows],
            )
            for i, row, token, logprob in zip(live, rows, tokens, logprobs, strict=True):
                row.completion_ids.append(token)
                row.logprobs.append(logprob)
                pending[i] = token
                self._update_finish(row)
            self.stats.generated_tokens += len(live)
        batch.pending = torch.tensor(pending, dtype=torch.long, device=self.device)

    def _count_busy_time(self) -> None:
        now = time.perf_counter()
        self.stats.busy_seconds += now - self._busy_since
        self._busy_since = now

    def _retire(self, batch: RunningBatch | None) -> RunningBatch | None:
        """Answer finished rows, drop them and cancelled ones; None when no row is left."""
        if batch is None:
            return None
        # Counted before any answer leaves, so a caller that reads the stats on its answer
        # finds the time that produced it.
        self._count_busy_time()
        keep = []
        for i, row in enumerate(batch.rows):
            if row.request.abandoned and row.finish_reason is None:
                row.finish_reason = "cancelled"
                self.stats.cancelled += 1
            elif row.finish_reason is not None and not row.answered:
                _resolve(row.request, result=self._finish(row))
            row.answered = row.finish_reason is not None
            if not row.answered:
                keep.append(i)
        if not keep:
            self._ops.release(batch)
            return None
        if not batch.compactable or len(keep) == batch.size:
            return batch  # static fallback: finished rows ride along until the batch ends
        return self._ops.keep(batch, keep)

    def _set_decoding(self, decoding: bool) -> None:
        with self._swap:
            if decoding:
                while self._pending_swaps:
                    self._swap.wait()
            self._decoding = decoding
            self._swap.notify_all()

    def _token_budget(self, request: _Request) -> int:
        budget = request.sampling.max_tokens
        if self.context_length is not None:
            budget = min(budget, self.context_length - len(request.prompt_ids))
        return max(budget, 1)

    def _generator_for(self, sampling: SamplingParams) -> Any:
        import torch

        if sampling.seed is None:
            return self._default_generator
        return torch.Generator(device=self.device).manual_seed(sampling.seed)

    def _update_finish(self, row: _RowState) -> None:
        sampling = row.request.sampling
        if row.completion_ids[-1] in self._eos_ids:
            row.finish_reason = "stop"
            return
        if sampling.stop:
            text = self.tokenizer.decode(
                row.completion_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            hits = [text.find(s) for s in sampling.stop if s and s in text]
            if hits:
                row.finish_reason = "stop"
                row.stop_text_end = min(hits)
                return
        if len(row.completion_ids) >= row.budget:
            row.finish_reason = "length"

    def _finish(self, row: _RowState) -> ModelOutput:
        text_ids = [t for t in row.completion_ids if t not in self._eos_ids]
        text = self.tokenizer.decode(
            text_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        if row.stop_text_end is not None:
            text = text[: row.stop_text_end]
        return ModelOutput(
            text=text,
            finish_reason=row.finish_reason or "length",
            prompt_ids=list(row.request.prompt_ids),
            completion_ids=row.completion_ids,
            logprobs=row.logprobs if row.request.sampling.logprobs else [],
            policy_version=self.policy_version,  # no swap happens while a row decodes
        )


def tied_keys(model: Any) -> set[str]:
    # A list in older transformers, a {tied name: source name} dict in newer ones.
    return set(getattr(model, "_tied_weights_keys", None) or [])
