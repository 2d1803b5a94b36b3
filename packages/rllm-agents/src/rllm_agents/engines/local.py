"""A local transformers engine that batches concurrent requests (CPU or CUDA).

Concurrent ``generate`` calls are queued; one worker thread takes up to ``max_batch_size``
waiting requests at a time and decodes them together in one left-padded batch with a KV
cache, so N agents waiting on the model cost about one forward pass per token, not N.

Logprobs: each returned logprob is ``log_softmax(logits / temperature)`` at the sampled token,
i.e. under the temperature-scaled distribution *before* top-p truncation (the distribution a
policy-gradient trainer scores with). With ``temperature == 0`` (greedy) it is the plain
``log_softmax(logits)``.

Completion ids include the EOS token or the tokens that completed a stop string (the model
generated them and a trainer must learn them); the text leaves both out.

``update_weights`` swaps weights between batches: it waits for the running batch to finish.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.engines.base import EngineError, ModelOutput, SamplingParams
from rllm_agents.engines.prompting import prompt_ids_for

_STOP_WORKER = object()


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass
class BatchStats:
    """How requests were grouped: `batches` < `requests` means batching happened."""

    requests: int = 0
    batches: int = 0
    forward_passes: int = 0
    generated_tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)


@dataclass
class _RowState:
    """Decoding state of one request inside a batch."""

    request: _Request
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    stop_text_end: int | None = None  # where the text is cut when a stop string matched
    generator: Any = None


class LocalEngine:
    """RolloutEngine over an in-process Hugging Face causal LM."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: str = "cpu",
        max_batch_size: int = 16,
        batch_wait_s: float = 0.05,
        dtype: Any = None,
        seed: int = 0,
    ) -> None:
        from rllm_agents.models import load_model, load_tokenizer

        if isinstance(model, str) or hasattr(model, "__fspath__"):
            tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
            model = load_model(model, device=device, dtype=dtype)
        if tokenizer is None:
            raise ValueError("LocalEngine needs a tokenizer when given a model object")
        import torch

        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.stats = BatchStats()
        self._eos_ids = self._collect_eos_ids()
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._context_length = getattr(model.config, "max_position_embeddings", None)
        self._default_generator = torch.Generator(device=self.device).manual_seed(seed)
        self._requests: queue.Queue = queue.Queue()
        self._model_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._closed = False

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
        sampling = sampling or SamplingParams()
        if self._closed:
            raise EngineError("LocalEngine is closed")
        ids = prompt_ids_for(self.tokenizer, messages, prompt_ids, tools)
        if not ids:
            raise ValueError("the prompt is empty")
        if self._context_length is not None and len(ids) >= self._context_length:
            raise EngineError(
                f"prompt of {len(ids)} tokens does not fit the model context "
                f"({self._context_length} tokens)"
            )
        self._ensure_worker()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._requests.put(_Request(ids, sampling, future, loop))
        return await future

    def update_weights(self, state_dict_or_model: Any) -> None:
        """Load new weights (a state dict or a model with the same architecture) between batches."""
        state_dict = (
            state_dict_or_model.state_dict()
            if hasattr(state_dict_or_model, "state_dict")
            else state_dict_or_model
        )
        with self._model_lock:
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            # Tied embeddings may legitimately be absent; any other mismatch is a real error.
            missing = [k for k in missing if k not in _tied_keys(self.model)]
            if missing or unexpected:
                raise ValueError(
                    f"update_weights: state dict does not match the model "
                    f"(missing {missing[:5]}, unexpected {list(unexpected)[:5]})"
                )

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

    # ---- worker -----------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(
                target=self._serve, name="rllm-local-engine", daemon=True
            )
            self._worker.start()

    def _next_batch(self) -> tuple[list[_Request], bool]:
        """Block for one request, then gather whatever else arrives within batch_wait_s."""
        first = self._requests.get()
        if first is _STOP_WORKER:
            return [], True
        batch = [first]
        while len(batch) < self.max_batch_size:
            try:
                item = self._requests.get(timeout=self.batch_wait_s)
            except queue.Empty:
                break
            if item is _STOP_WORKER:
                return batch, True
            batch.append(item)
        return batch, False

    def _serve(self) -> None:
        stop = False
        while not stop:
            batch, stop = self._next_batch()
            live = [r for r in batch if not r.future.cancelled()]
            if not live:
                continue
            try:
                with self._model_lock:
                    outputs = self._decode_batch(live)
            except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                error = EngineError(f"local generation failed: {type(exc).__name__}: {exc}")
                for request in live:
                    _resolve(request, exception=error)
                continue
            for request, output in zip(live, outputs, strict=True):
                _resolve(request, result=output)
        # Anything queued after close gets a clear error instead of hanging forever.
        while not self._requests.empty():
            item = self._requests.get_nowait()
            if item is not _STOP_WORKER:
                _resolve(item, exception=EngineError("LocalEngine is closed"))

    def _decode_batch(self, requests: list[_Request]) -> list[ModelOutput]:
        import torch

        self.stats.requests += len(requests)
        self.stats.batches += 1
        self.stats.batch_sizes.append(len(requests))
        rows = [_RowState(r, generator=self._generator_for(r.sampling)) for r in requests]
        max_new = max(self._token_budget(r) for r in requests)

        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(requests), width), self._pad_id, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for i, r in enumerate(requests):
            input_ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            attention[i, width - len(r.prompt_ids) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)

        past = None
        with torch.inference_mode():
            for _ in range(max_new):
                out = self.model(
                    input_ids=input_ids,
                    attention_mask=attention,
                    position_ids=positions,
                    past_key_values=past,
                    use_cache=True,
                )
                self.stats.forward_passes += 1
                past = out.past_key_values
                logits = out.logits[:, -1, :].float()
                next_ids = self._sample_rows(rows, logits)
                if all(row.finish_reason for row in rows):
                    break
                input_ids = next_ids.unsqueeze(-1).to(self.device)
                attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
                positions = positions[:, -1:] + 1
        return [self._finish(row) for row in rows]

    def _token_budget(self, request: _Request) -> int:
        budget = request.sampling.max_tokens
        if self._context_length is not None:
            budget = min(budget, self._context_length - len(request.prompt_ids))
        return max(budget, 1)

    def _generator_for(self, sampling: SamplingParams) -> Any:
        import torch

        if sampling.seed is None:
            return self._default_generator
        return torch.Generator(device=self.device).manual_seed(sampling.seed)

    def _sample_rows(self, rows: list[_RowState], logits: Any) -> Any:
        """Pick one token per unfinished row; finished rows get padding (ignored)."""
        import torch

        chosen = torch.full((len(rows),), self._pad_id, dtype=torch.long)
        for i, row in enumerate(rows):
            if row.finish_reason:
                continue
            token, logprob = _sample_token(logits[i], row.request.sampling, row.generator)
            row.completion_ids.append(token)
            row.logprobs.append(logprob)
            chosen[i] = token
            self.stats.generated_tokens += 1
            self._update_finish(row)
        return chosen

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
        if len(row.completion_ids) >= self._token_budget(row.request):
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
        )


def _sample_token(logits: Any, sampling: SamplingParams, generator: Any) -> tuple[int, float]:
    import torch

    if sampling.temperature <= 0:
        logprobs = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits))
        return token, float(logprobs[token])
    logprobs = torch.log_softmax(logits / sampling.temperature, dim=-1)
    probs = logprobs.exp()
    if sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
        drop = (sorted_probs.cumsum(-1) - sorted_probs) >= sampling.top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    # Inverse-CDF sampling: one uniform draw, several times faster than multinomial over a
    # 50k vocabulary and just as exact.
    cdf = probs.cumsum(-1)
    draw = torch.rand((), generator=generator, device=probs.device) * cdf[-1]
    token = min(int(torch.searchsorted(cdf, draw, right=True)), probs.shape[-1] - 1)
    return token, float(logprobs[token])


def _resolve(request: _Request, *, result: Any = None, exception: BaseException | None = None):
    def settle() -> None:
        if request.future.done():
            return  # the caller gave up (timeout / cancel)
        if exception is not None:
            request.future.set_exception(exception)
        else:
            request.future.set_result(result)

    try:
        request.loop.call_soon_threadsafe(settle)
    except RuntimeError:
        pass  # the caller's event loop is gone; nobody is waiting for this answer


def _tied_keys(model: Any) -> set[str]:
    # A list in older transformers, a {tied name: source name} dict in newer ones.
    return set(getattr(model, "_tied_weights_keys", None) or [])
