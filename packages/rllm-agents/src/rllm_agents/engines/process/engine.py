"""`ProcessEngine`: a LocalEngine in a process of its own, fed new weights by its owner.

A trainer that samples from a copy of its policy in its own process shares the interpreter and,
on a CPU, torch's thread pool with it: generation and the update take turns instead of running
side by side. This engine runs the same continuous-batching :class:`LocalEngine` in a child
process (``spawn``), so the two never contend for the interpreter lock and each has its own
thread count (``cpu_threads``: the child's, process-wide).

What crosses the process boundary:

* the model once, at start: its config, generation config and weights (a peft model merged
  first), the weights packed into one shared-memory buffer (``packed_weights``; one CUDA
  allocation sent by IPC handle on a GPU), so the child maps them instead of reading them
  through a pipe;
* each request's arguments and each answer (``ModelOutput``, a scored sequence's log-probs, or
  the exception the child raised: a ``ContextOverflow`` stays a ``ContextOverflow``);
* weights: ``update_weights(state_dict, version)`` packs the tensors into a fresh buffer the
  same way and blocks until the child has loaded them (the LocalEngine's swap: no sequence mixes two
  versions). The trainer's own tensors are never moved or aliased.

The child exits when its owner closes it, and also when the owner dies (a parent-death signal,
``kill -9`` included); a child that dies fails every request in flight with an ``EngineError`` naming its exit
code, instead of leaving callers waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rllm_agents.engines.base import EngineError, ModelOutput, SamplingParams
from rllm_agents.engines.packed_weights import PackedWeights, pack
from rllm_agents.engines.weight_sync import lora_scalings, merged_state_dict
from rllm_agents.run_folder import die_with_parent

START_TIMEOUT_S = 300.0  # importing torch + transformers and mapping the model in the child
SWAP_TIMEOUT_S = 600.0  # a swap waits for the sequences in flight to finish


@dataclass(frozen=True)
class ChildOptions:
    """How the child builds its LocalEngine (the first message it receives)."""

    device: str
    max_batch_size: int
    seed: int
    cpu_threads: int | None
    autocast_dtype: Any = None


@dataclass
class BusyTime:
    """The child's time spent decoding (LocalEngine's ``stats.busy_seconds``), as last reported."""

    busy_seconds: float = 0.0


class ProcessEngine:
    """RolloutEngine over a LocalEngine in a child process (module docstring).

    `model` is copied, not shared: the engine serves the weights it had when the engine was
    made, until ``update_weights``. Thread-safe: any thread or event loop may call it.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: str = "cpu",
        max_batch_size: int = 32,
        seed: int = 0,
        cpu_threads: int | None = None,
        autocast_dtype: Any = None,
        version: int | None = 0,
    ) -> None:
        self._process, self._connection = start_child(
            ChildOptions(device, max_batch_size, seed, cpu_threads, autocast_dtype)
        )
        self._send_lock = threading.Lock()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count()
        self._closed = False
        self.stats = BusyTime()
        self.policy_version = version
        # The served model's, as LocalEngine reads it (a gateway refuses a max_tokens beyond it).
        self.context_length = getattr(
            getattr(model, "config", None), "max_position_embeddings", None
        )
        self._reader = threading.Thread(target=self._read, name="rllm-process-reader", daemon=True)
        self._reader.start()
        # Whatever happens to this object, the child does not outlive it.
        self._finalizer = weakref.finalize(self, _stop_child, self._process, self._connection)
        try:
            started = self._call("start", blueprint(model), tokenizer, version)
            started.result(timeout=START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    # ---- the RolloutEngine API ----------------------------------------------------------------

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        call = {"messages": messages, "prompt_ids": prompt_ids, "sampling": sampling}
        if tools is not None:
            call["tools"] = tools
        return await self._awaited("generate", call)

    async def generate_together(
        self, calls: Sequence[Mapping[str, Any]]
    ) -> list[ModelOutput | Exception]:
        """As ``LocalEngine.generate_together``: one round, admitted as one batch in the child."""
        return await self._awaited("together", [dict(call) for call in calls])

    async def prompt_logprobs(self, token_ids: Sequence[int], start: int = 1) -> list[float]:
        """The child's LocalEngine scores the given tokens from `start` on (engines/scoring.py)."""
        return await self._awaited("score", [int(token) for token in token_ids], start)

    def update_weights(self, state_dict_or_model: Any, *, version: int | None = None) -> None:
        """Load new weights (a state dict with the served model's names, or a model) in the
        child; returns once the child serves them."""
        state_dict = (
            state_dict_or_model.state_dict()
            if hasattr(state_dict_or_model, "state_dict")
            else state_dict_or_model
        )
        loaded = self._call("weights", pack(state_dict), version)
        self.policy_version = loaded.result(timeout=SWAP_TIMEOUT_S)

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError, ValueError):
            with self._send_lock:
                self._connection.send(("close", -1, ()))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=30)
        self._finalizer()  # terminates it if it did not stop, closes the pipe
        self._reader.join(timeout=5)
        self._fail_pending(EngineError("ProcessEngine is closed"))

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    # ---- plumbing ------------------------------------------------------------------------------

    async def _awaited(self, kind: str, *payload: Any) -> Any:
        future = self._call(kind, *payload)
        call_id = future.call_id  # type: ignore[attr-defined]
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # The caller gave up (an episode timeout): the child drops the request from its
            # batch rather than decode it to the end for nobody.
            with contextlib.suppress(OSError, ValueError):
                self._send("cancel", call_id)
            raise

    def _call(self, kind: str, *payload: Any) -> concurrent.futures.Future:
        if self._closed:
            raise EngineError("ProcessEngine is closed")
        call_id = next(self._ids)
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.call_id = call_id  # type: ignore[attr-defined]
        with self._pending_lock:
            self._pending[call_id] = future
        try:
            self._send(kind, call_id, *payload)
        except (OSError, ValueError) as exc:
            with self._pending_lock:
                self._pending.pop(call_id, None)
            raise EngineError(f"the engine process is gone ({self._exit_text()})") from exc
        return future

    def _send(self, kind: str, call_id: int, *payload: Any) -> None:
        with self._send_lock:
            self._connection.send((kind, call_id, payload))

    def _read(self) -> None:
        """The reader thread: settles each call with the child's answer."""
        while True:
            try:
                call_id, failed, answer, busy = self._connection.recv()
            except (EOFError, OSError):
                break
            self.stats.busy_seconds = busy
            with self._pending_lock:
                future = self._pending.pop(call_id, None)
            if future is None or future.done():
                continue
            if failed:
                future.set_exception(answer)
            else:
                future.set_result(answer)
        self._fail_pending(EngineError(f"the engine process exited ({self._exit_text()})"))

    def _fail_pending(self, error: EngineError) -> None:
        with self._pending_lock:
            pending, self._pending = list(self._pending.values()), {}
        for future in pending:
            if not future.done():
                future.set_exception(error)

    def _exit_text(self) -> str:
        code = self._process.poll()
        return "still running" if code is None else f"exit code {code}"


@dataclass(frozen=True)
class ModelBlueprint:
    """What the child builds its model from: the architecture's config, the generation config
    (its end-of-sequence ids) and the weights, packed."""

    config: Any
    generation_config: Any
    dtype: Any
    weights: PackedWeights


def blueprint(model: Any) -> ModelBlueprint:
    """`model` as the child rebuilds it: a plain Hugging Face model, a peft model's adapters
    merged in (the child needs no adapter library)."""
    state_dict = merged_state_dict(model.state_dict(), lora_scalings(model))
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return ModelBlueprint(
        base.config, base.generation_config, next(base.parameters()).dtype, pack(state_dict)
    )


def _stop_child(process: subprocess.Popen, connection: Any = None) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    if connection is not None:
        connection.close()


def start_child(options: ChildOptions) -> tuple[subprocess.Popen, Any]:
    """The child process (``python -m rllm_agents.engines.process.child``) and its connection.

    Started as a module of its own rather than by multiprocessing's ``spawn``, which would
    import the caller's ``__main__`` again in the child (a script without a ``__main__`` guard
    would run twice). The child is handed this process's multiprocessing auth key, so the
    file descriptors of shared tensors, which it fetches from this process's resource sharer,
    are given to it.
    """
    import multiprocessing
    from multiprocessing.connection import Listener

    import torch.multiprocessing  # noqa: F401 - registers the tensor reducers on the pipe

    authkey = bytes(multiprocessing.current_process().authkey)
    listener = Listener(family="AF_UNIX", authkey=authkey)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "rllm_agents.engines.process.child"],
            stdin=subprocess.PIPE,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - kill -9 of this process ends it too
        )
        assert process.stdin is not None
        process.stdin.write(
            json.dumps({"address": listener.address, "authkey": authkey.hex()}).encode()
        )
        process.stdin.close()
        connection = _accept(listener, process)
    finally:
        listener.close()
    try:
        connection.send(options)
    except BaseException:
        _stop_child(process, connection)
        raise
    return process, connection


def _accept(listener: Any, process: subprocess.Popen) -> Any:
    """The child's connection; an EngineError if the child exits or takes too long first."""
    accepted: concurrent.futures.Future = concurrent.futures.Future()

    def accept() -> None:
        try:
            accepted.set_result(listener.accept())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            accepted.set_exception(exc)

    threading.Thread(target=accept, name="rllm-process-accept", daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            return accepted.result(timeout=0.2)
        except concurrent.futures.TimeoutError:
            if process.poll() is not None:
                break
    _stop_child(process)
    raise EngineError(
        f"the engine process did not connect (exit code {process.poll()}); its error is above"
    )
