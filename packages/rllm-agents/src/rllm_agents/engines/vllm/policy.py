"""Which policy a vLLM engine samples from, and changing it: full weights or LoRA adapters.

Shared by the in-process engine (``AsyncLLM``) and the server form (its HTTP endpoints,
vllm_server.ServerControl): both offer vLLM's ``pause_generation``, ``resume_generation``,
``collective_rpc``, ``reset_prefix_cache`` and ``add_lora`` / ``remove_lora`` /
``list_loras``. Everything here runs on the engine's own loop (engines/loop_thread.py), so
asyncio's primitives suffice.

- A request takes a ``lease`` on the policy in force when it starts; its output carries that
  version. A change of policy closes the gate first, so no request starts half-way through.
- A full sync (``load_full``): the trainer's state dict is written to a shared weights file
  while requests still run (packed_weights.WeightsFile, in the engine's dtype). Then, as
  ``settings.sync_pause`` says, the requests running finish first ("wait": every sample is
  from one policy), are aborted ("abort"; the engine starts them again on the new weights)
  or are frozen and carry on with the new weights ("keep"; they keep the version they
  started with). vLLM is paused, every worker loads the
  file by name (vllm_worker.RllmWorkerExtension), the prefix cache is reset (its KV blocks
  were computed with the old weights) and generation resumes.
- A LoRA sync (``load_lora``) registers the adapter with vLLM under a new adapter id; new
  requests use it at once while those on the previous adapter finish on it. The base
  weights are not touched. Adapters no request uses any more are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from rllm_agents.engines.base import EngineError


@dataclass(frozen=True)
class Policy:
    version: int
    lora_request: Any = None  # vllm.lora.request.LoRARequest, or None for the base weights


@dataclass
class _Sync:
    """The asyncio objects of one engine loop, made there on first use."""

    gate: asyncio.Event
    change: asyncio.Lock
    idle: asyncio.Condition  # notified whenever a lease ends


class PolicyState:
    def __init__(self, engine: Any, settings: Any, weights_dtype: Any = None) -> None:
        self._engine = engine
        self._settings = settings
        self._weights_dtype = weights_dtype  # what the weights file holds (None: as sent)
        self.current = Policy(version=0)
        self._sync: _Sync | None = None
        self._running = 0
        self._in_use: Counter[int | None] = Counter()  # running requests per LoRA id
        self._weights_file = None  # packed_weights.WeightsFile, kept between syncs
        # Syncs that aborted the running requests (sync_pause="abort"), counted as each starts:
        # a request that sees the count move while it ran was aborted by one, not refused.
        self.aborting_syncs = 0

    @property
    def version(self) -> int:
        return self.current.version

    def _objects(self) -> _Sync:
        if self._sync is None:
            self._sync = _Sync(asyncio.Event(), asyncio.Lock(), asyncio.Condition())
            self._sync.gate.set()
        return self._sync

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Policy]:
        """The policy a new request runs with, held until the request ends."""
        sync = self._objects()
        await sync.gate.wait()
        policy = self.current
        lora_id = policy.lora_request.lora_int_id if policy.lora_request else None
        self._in_use[lora_id] += 1
        self._running += 1
        try:
            yield policy
        finally:
            self._in_use[lora_id] -= 1
            self._running -= 1
            async with sync.idle:
                sync.idle.notify_all()

    @contextlib.asynccontextmanager
    async def _gate_closed(self) -> AsyncIterator[None]:
        """Hold new requests back while the policy changes."""
        sync = self._objects()
        sync.gate.clear()
        try:
            yield
        finally:
            sync.gate.set()

    async def load_full(self, state_dict: Mapping[str, Any], version: int) -> dict[str, float]:
        sync = self._objects()
        async with sync.change:  # one change at a time: the weights file is written in place
            started = time.perf_counter()
            weights = await asyncio.to_thread(self._write, state_dict)
            written = time.perf_counter()
            async with self._gate_closed():
                if self._settings.sync_pause == "wait":
                    async with sync.idle:
                        await sync.idle.wait_for(lambda: self._running == 0)
                elif self._settings.sync_pause == "abort":
                    self.aborting_syncs += 1
                await self._engine.pause_generation(
                    mode=self._settings.sync_pause, clear_cache=True
                )
                try:
                    paused = time.perf_counter()
                    results = await self._engine.collective_rpc(
                        "rllm_load_weights_file", args=(weights.path, weights.table())
                    )
                    await self._engine.reset_prefix_cache()
                finally:
                    await self._engine.resume_generation()
                self.current = Policy(version=version)  # full weights: no adapter on top
            await self._remove_unused_adapters()
            finished = time.perf_counter()
        worker = results[0] if results else {}
        return {
            "write_s": written - started,
            "drain_s": paused - written,
            "load_s": float(worker.get("load_s", 0.0)),
            "repack_s": float(worker.get("repack_s", 0.0)),
            "total_s": finished - started,
        }

    def _write(self, state_dict: Mapping[str, Any]) -> Any:
        """`state_dict` in the shared weights file, in the dtype the engine computes in."""
        from rllm_agents.engines.packed_weights import WeightsFile

        weights = weights_to_send(state_dict)
        if self._weights_file is not None and self._weights_file.fits(weights):
            self._weights_file.write(weights)
        else:
            if self._weights_file is not None:
                self._weights_file.close()
            self._weights_file = WeightsFile(weights, self._weights_dtype)
        return self._weights_file

    async def load_lora(self, adapter_dir: str, version: int) -> None:
        from vllm.lora.request import LoRARequest

        if not self._settings.enable_lora:
            raise EngineError("this vLLM engine was started without LoRA (enable_lora=True)")
        request = LoRARequest(f"policy-v{version}", _lora_id(version), adapter_dir)
        async with self._objects().change:
            if not await self._engine.add_lora(request):
                raise EngineError(f"vLLM could not load the LoRA adapter in {adapter_dir}")
            self.current = Policy(version=version, lora_request=request)  # for new requests
            await self._remove_unused_adapters()

    async def _remove_unused_adapters(self) -> None:
        if not self._settings.enable_lora:
            return  # vLLM refuses to list adapters it cannot have
        serving = self.current.lora_request.lora_int_id if self.current.lora_request else None
        for lora_id in await self._engine.list_loras():
            if lora_id != serving and self._in_use[lora_id] == 0:
                await self._engine.remove_lora(lora_id)

    def detach(self) -> None:
        """Drop the reference to vLLM's engine (it is being shut down)."""
        self._engine = None

    def close(self) -> None:
        if self._weights_file is not None:
            self._weights_file.close()
            self._weights_file = None


def weights_to_send(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors of a trainer's HF state dict that vLLM loads: detached, with the rotary
    buffers vLLM computes itself left out."""
    return {
        name: tensor.detach()
        for name, tensor in state_dict.items()
        if not name.endswith("rotary_emb.inv_freq")
    }


def _lora_id(version: int) -> int:
    """vLLM's adapter ids start at 1; a version may be 0."""
    return version + 1
