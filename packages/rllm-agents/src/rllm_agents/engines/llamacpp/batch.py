"""llama.cpp inside this process, decoding many sequences in one batch, as LocalEngine's model.

``LocalEngine(LlamaCppModel.load(gguf), tokenizer)`` schedules, samples and answers exactly as
it does for a transformers model (continuous batching, per-request seeds, the trainer's
log-prob definition from ``engines/sampling.py``), while every forward pass runs in llama.cpp's
own kernels: one ``llama_decode`` feeds the pending token of every running sequence, so on a
CPU the weights are read once per step for all of them instead of once per request as
one-request servers do (measured on 2 cores, SmolLM2-135M at F16 on one thread: 57 tokens/s
for one sequence, 87 for four decoding together, 120 for sixteen).

The KV cache is llama.cpp's unified one, shared by up to ``max_sequences`` sequences. A
sequence that has finished keeps its cells as a *prefix cache*: a later prompt that starts with
its tokens (the next turn of the same conversation, or another conversation with the same
system prompt) copies those cells (``llama_memory_seq_cp`` shares them, nothing is recomputed)
and reads only its own new tokens. The least recently used finished sequences are dropped when
the sequence ids or the cells run out; when the running sequences alone outgrow the cells, the
context is made again with twice as many (up to ``max_context_tokens``) and they are read into
it again.

New weights (``load_state_dict``, which ``LocalEngine.update_weights`` calls between decoding
rounds) are written into a GGUF with the served file's layout (``gguf_export``) and loaded in
place of the old model; llama.cpp maps the file, so the load costs little beyond the export.
The prefix cache goes with the old weights: its cells were computed by them.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rllm_agents.engines.base import ContextOverflow, EngineError
from rllm_agents.engines.running_batch import RunningBatch

# Below this many shared leading tokens, copying a cached prefix is not worth a sequence id.
MIN_REUSED_PREFIX = 8
# KV cells shared by all sequences (F16: ~23 KB each for SmolLM2): what a context starts with,
# and how far it may double when running sequences outgrow it.
DEFAULT_CONTEXT_TOKENS = 16384
MAX_CONTEXT_TOKENS = 1 << 17
BATCH_TOKENS = 512  # tokens per llama_decode call when reading prompts


@functools.cache
def _quiet_log_callback() -> Any:
    """A log callback that drops llama.cpp's load chatter (kept alive for the process)."""
    import llama_cpp

    return llama_cpp.llama_log_callback(lambda level, text, user_data: None)


@dataclass
class _Sequence:
    """One llama.cpp sequence id and the tokens its cells hold, position by position."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    running: bool = False  # a batch row decodes into it (never dropped or reused then)
    last_used: int = 0


@dataclass
class PromptReads:
    """Prompt tokens read by llama.cpp, and those taken from cached cells instead."""

    read: int = 0
    reused: int = 0


@dataclass
class _Loaded:
    """A llama.cpp model and its context (freed together)."""

    path: Path
    model: Any
    context: Any
    batch: Any
    n_vocab: int


class LlamaCppModel:
    """A GGUF served by llama.cpp in this process, with the methods LocalEngine drives.

    It stands where LocalEngine expects a causal LM: ``config.max_position_embeddings``,
    ``generation_config.eos_token_id``, ``load_state_dict`` (new weights, HF names, as a
    trainer's state dict has them) and ``batch_ops`` (itself: ``prefill``, ``decode``,
    ``merge``, ``keep`` over :class:`RunningBatch`, as ``running_batch`` does for transformers).
    """

    def __init__(
        self,
        gguf: str | os.PathLike[str],
        *,
        threads: int | None = None,
        max_sequences: int = 64,
        context_tokens: int = DEFAULT_CONTEXT_TOKENS,
        max_context_tokens: int = MAX_CONTEXT_TOKENS,
    ) -> None:
        import llama_cpp

        from rllm_agents.engines.llamacpp.server import usable_cores

        self.threads = threads or usable_cores()
        self.max_sequences = max_sequences
        self.context_tokens = context_tokens
        self.max_context_tokens = max(max_context_tokens, context_tokens)
        self._template = Path(gguf)
        self._layout: Any = None  # gguf_export.GGUFLayout, read at the first weight load
        self._exports = tempfile.TemporaryDirectory(prefix="rllm-llamacpp-", dir=_scratch_dir())
        self._versions = itertools.count(1)
        self._clock = itertools.count(1)
        self._sequences: dict[int, _Sequence] = {}
        self.prompt_reads = PromptReads()
        llama_cpp.llama_log_set(_quiet_log_callback(), ctypes.c_void_p())
        llama_cpp.llama_backend_init()
        self._loaded: _Loaded | None = self._load(self._template)
        vocab = llama_cpp.llama_model_get_vocab(self._loaded.model)
        eos = {llama_cpp.llama_vocab_eos(vocab), llama_cpp.llama_vocab_eot(vocab)} - {-1}
        trained_context = llama_cpp.llama_model_n_ctx_train(self._loaded.model)
        self.config = SimpleNamespace(
            max_position_embeddings=min(trained_context, self.max_context_tokens)
        )
        self.generation_config = SimpleNamespace(eos_token_id=sorted(eos))

    # ---- what LocalEngine calls on a model ----------------------------------------------------

    @property
    def batch_ops(self) -> LlamaCppModel:
        return self

    @property
    def max_rows(self) -> int:
        """Sequences that can decode at once: every sequence id (LocalEngine queues the rest)."""
        return self.max_sequences

    def to(self, device: Any) -> LlamaCppModel:
        if str(device) != "cpu":
            raise ValueError(f"LlamaCppModel runs on the CPU, not {device}")
        return self

    def eval(self) -> LlamaCppModel:
        return self

    def prompt_logprobs(self, token_ids: list[int], start: int) -> list[float]:
        """The log-prob of each given token from `start` on (``LocalEngine.prompt_logprobs``
        calls it between decoding steps; engines/llamacpp/scoring.py)."""
        from rllm_agents.engines.llamacpp.scoring import prompt_logprobs

        return prompt_logprobs(self, token_ids, start)

    def load_state_dict(self, state_dict: Any, strict: bool = False) -> tuple[list, list]:
        """Serve these HF-named weights from now on: exported into a GGUF shaped like the
        served one, then loaded in place of it. A name without a GGUF tensor, or a GGUF tensor
        without a weight, raises (``gguf_export``) before anything is replaced."""
        from rllm_agents.engines.llamacpp.gguf_export import export_gguf, read_layout

        del strict  # every GGUF tensor needs a value: partial loads are refused by the export
        if self._layout is None:
            self._layout = read_layout(self._template)
        target = Path(self._exports.name) / f"policy-v{next(self._versions)}.gguf"
        exported = export_gguf(state_dict, self._template, target, layout=self._layout)
        previous = self._loaded
        self._loaded = self._load(exported)
        self._sequences.clear()  # cells computed by the old weights
        if previous is not None:
            self._free(previous)
            if previous.path.parent == Path(self._exports.name):
                previous.path.unlink(missing_ok=True)
        return [], []

    def close(self) -> None:
        if self._loaded is not None:
            self._free(self._loaded)
            self._loaded = None
        self._exports.cleanup()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ---- batch operations (running_batch's, for llama.cpp) ------------------------------------

    def prefill(
        self, model: Any, prompts: list[list[int]], pad_id: int, device: Any
    ) -> tuple[Any, Any, Any, bool]:
        """Read new prompts into sequences of their own; returns (their sequence ids, None,
        last-position logits, True). Each prompt starts from the longest cached prefix."""
        del model, pad_id, device
        import numpy as np
        import torch

        if len(prompts) > self.max_sequences:
            raise EngineError(f"{len(prompts)} prompts, but only {self.max_sequences} sequences")
        claimed: list[_Sequence] = []
        try:
            for prompt in prompts:
                claimed.append(self._claim(prompt))
            feeds = [
                (sequence, prompt[len(sequence.tokens) :])
                for sequence, prompt in zip(claimed, prompts, strict=True)
            ]
            self.prompt_reads.reused += sum(len(sequence.tokens) for sequence in claimed)
            self.prompt_reads.read += sum(len(rest) for _, rest in feeds)
            logits = np.empty((len(prompts), self._require().n_vocab), dtype=np.float32)
            items = [
                (token, len(sequence.tokens) + offset, sequence, row, offset == len(rest) - 1)
                for row, (sequence, rest) in enumerate(feeds)
                for offset, token in enumerate(rest)
            ]
            for chunk in self._chunks(items):
                self._decode(chunk, logits)
        except BaseException:
            # Only these prompts fail: their sequences are freed, the running ones go on.
            for sequence in claimed:
                self._drop(sequence)
            raise
        return [s.seq_id for s in claimed], None, torch.from_numpy(logits), True

    def decode(self, model: Any, batch: RunningBatch) -> Any:
        """Feed every row's pending token; returns the next-token logits (rows × vocab)."""
        del model
        import numpy as np
        import torch

        logits = np.empty((batch.size, self._require().n_vocab), dtype=np.float32)
        items = []
        for row, (seq_id, token) in enumerate(
            zip(batch.cache, batch.pending.tolist(), strict=True)
        ):
            sequence = self._sequences[seq_id]
            items.append((int(token), len(sequence.tokens), sequence, row, True))
        self._decode(items, logits)
        return torch.from_numpy(logits)

    def merge(self, first: RunningBatch, second: RunningBatch) -> RunningBatch:
        import torch

        return RunningBatch(
            rows=first.rows + second.rows,
            cache=first.cache + second.cache,
            attention=None,
            pending=torch.cat([first.pending, second.pending]),
            compactable=True,
        )

    def release(self, batch: RunningBatch) -> None:
        """The batch is over (every row answered, or failed): its cells stay as prefix cache."""
        self._finish_sequences(batch.cache)

    def keep(self, batch: RunningBatch, indices: list[int]) -> RunningBatch:
        """The batch reduced to `indices`; the rows left behind keep their cells as prefix
        cache."""
        kept = set(indices)
        self._finish_sequences([s for row, s in enumerate(batch.cache) if row not in kept])
        return RunningBatch(
            rows=[batch.rows[i] for i in indices],
            cache=[batch.cache[i] for i in indices],
            attention=None,
            pending=batch.pending[indices],
            compactable=True,
        )

    # ---- sequences ----------------------------------------------------------------------------

    def _finish_sequences(self, seq_ids: list[int]) -> None:
        for seq_id in seq_ids:
            if seq_id in self._sequences:
                self._sequences[seq_id].running = False

    def _claim(self, prompt: list[int]) -> _Sequence:
        """A running sequence for `prompt`, holding the longest cached prefix of it (at most
        all but its last token, whose logits are needed)."""
        import llama_cpp

        limit = len(prompt) - 1
        best, shared = None, 0
        for sequence in self._sequences.values():
            length = _common_prefix(sequence.tokens, prompt, limit)
            if length > shared:
                best, shared = sequence, length
        memory = llama_cpp.llama_get_memory(self._require().context)
        if best is not None and not best.running and shared >= MIN_REUSED_PREFIX:
            # A finished sequence's cells are taken over: cut them back to the shared prefix.
            llama_cpp.llama_memory_seq_rm(memory, best.seq_id, shared, -1)
            del best.tokens[shared:]
            claimed = best
        else:
            claimed = _Sequence(self._free_seq_id(sparing=best))
            self._sequences[claimed.seq_id] = claimed
            still_cached = best is not None and self._sequences.get(best.seq_id) is best
            if still_cached and shared >= MIN_REUSED_PREFIX:
                llama_cpp.llama_memory_seq_cp(memory, best.seq_id, claimed.seq_id, 0, shared)
                claimed.tokens = best.tokens[:shared]
        claimed.running = True
        claimed.last_used = next(self._clock)
        return claimed

    def _free_seq_id(self, sparing: _Sequence | None = None) -> int:
        """An unused sequence id, dropping finished sequences (least recently used first, and
        `sparing`, which a prompt would copy from, last) when none is free."""
        while True:
            taken = set(self._sequences)
            free = [seq_id for seq_id in range(self.max_sequences) if seq_id not in taken]
            if free:
                return free[0]
            if not (self._evict_one(sparing) or self._evict_one()):
                raise EngineError(f"all {self.max_sequences} llama.cpp sequences are running")

    def _evict_one(self, sparing: _Sequence | None = None) -> bool:
        """Drop the least recently used finished sequence other than `sparing` (about to be
        copied from); False when none is left."""
        idle = [s for s in self._sequences.values() if not s.running and s is not sparing]
        if not idle:
            return False
        self._drop(min(idle, key=lambda s: s.last_used))
        return True

    def _drop(self, sequence: _Sequence) -> None:
        import llama_cpp

        if self._loaded is not None:
            memory = llama_cpp.llama_get_memory(self._loaded.context)
            llama_cpp.llama_memory_seq_rm(memory, sequence.seq_id, -1, -1)
        self._sequences.pop(sequence.seq_id, None)

    def _decode(self, items: list[tuple], logits: Any) -> None:
        """One llama_decode over (token, position, sequence, row, wants logits) items; the
        logits of marked items go to `logits[row]`. When the cells are full, finished
        sequences are dropped, oldest first, and when only running ones are left the cells
        are doubled (:meth:`_grow`), until the batch fits."""
        import llama_cpp
        import numpy as np

        while True:
            loaded = self._require()
            batch = loaded.batch
            batch.n_tokens = len(items)
            for i, (token, position, sequence, _, wants) in enumerate(items):
                batch.token[i] = token
                batch.pos[i] = position
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = sequence.seq_id
                batch.logits[i] = wants
            status = llama_cpp.llama_decode(loaded.context, batch)
            if status == 0:
                break
            if status != 1 or not (self._evict_one() or self._grow()):
                raise ContextOverflow(
                    f"llama.cpp decode failed ({status}): {len(items)} new tokens do not fit "
                    f"the {self.context_tokens} KV cells (at most {self.max_context_tokens}) "
                    f"beside the running sequences"
                )
        for i, (token, _, sequence, row, wants) in enumerate(items):
            sequence.tokens.append(token)
            if wants:
                pointer = llama_cpp.llama_get_logits_ith(loaded.context, i)
                logits[row] = np.ctypeslib.as_array(pointer, shape=(loaded.n_vocab,))

    def _chunks(self, items: list[tuple]) -> list[list[tuple]]:
        """`items` in pieces that one llama_decode takes (its batch size, which llama.cpp
        lowers to the cell count in a small context)."""
        import llama_cpp

        size = min(BATCH_TOKENS, llama_cpp.llama_n_batch(self._require().context))
        return [items[start : start + size] for start in range(0, len(items), size)]

    def _grow(self) -> bool:
        """Twice the KV cells, for running sequences that outgrew them: a new context, into
        which each running sequence's tokens are read again (finished ones are dropped, and
        copied prefixes are no longer shared). False when that would pass
        `max_context_tokens`."""
        import llama_cpp

        cells = self.context_tokens * 2
        if cells > self.max_context_tokens:
            return False
        loaded = self._require()
        context = self._new_context(loaded.model, cells, loaded.path)
        llama_cpp.llama_free(loaded.context)
        loaded.context = context
        self.context_tokens = cells
        for sequence in [s for s in self._sequences.values() if not s.running]:
            del self._sequences[sequence.seq_id]
        for sequence in list(self._sequences.values()):
            tokens, sequence.tokens = sequence.tokens, []
            replay = [
                (token, position, sequence, 0, False) for position, token in enumerate(tokens)
            ]
            for chunk in self._chunks(replay):
                self._decode(chunk, None)
        return True

    # ---- loading ------------------------------------------------------------------------------

    def _load(self, path: Path) -> _Loaded:
        import llama_cpp

        model_params = llama_cpp.llama_model_default_params()
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not model:
            raise EngineError(f"llama.cpp could not load {path}")
        try:
            context = self._new_context(model, self.context_tokens, path)
        except BaseException:
            llama_cpp.llama_model_free(model)
            raise
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        batch = llama_cpp.llama_batch_init(BATCH_TOKENS, 0, 1)
        return _Loaded(path, model, context, batch, n_vocab)

    def _new_context(self, model: Any, cells: int, path: Path) -> Any:
        import llama_cpp

        params = llama_cpp.llama_context_default_params()
        params.n_ctx = cells
        params.n_batch = BATCH_TOKENS
        params.n_ubatch = BATCH_TOKENS
        params.n_seq_max = self.max_sequences
        params.n_threads = params.n_threads_batch = self.threads
        params.kv_unified = True  # cells shared by all sequences: copied prefixes cost nothing
        context = llama_cpp.llama_init_from_model(model, params)
        if not context:
            raise EngineError(f"llama.cpp could not make a context of {cells} cells for {path}")
        return context

    @staticmethod
    def _free(loaded: _Loaded) -> None:
        import llama_cpp

        llama_cpp.llama_batch_free(loaded.batch)
        llama_cpp.llama_free(loaded.context)
        llama_cpp.llama_model_free(loaded.model)

    def _require(self) -> _Loaded:
        if self._loaded is None:
            raise EngineError("the llama.cpp model is closed")
        return self._loaded


def _common_prefix(cached: list[int], prompt: list[int], limit: int) -> int:
    length = 0
    for mine, theirs in zip(cached, prompt[:limit], strict=False):
        if mine != theirs:
            break
        length += 1
    return length


def _scratch_dir() -> str | None:
    """Exports go to memory-backed /dev/shm where there is one (a 135M F16 export is 270 MB
    written per update)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
