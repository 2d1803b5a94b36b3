"""Which policy a VLLMEngine samples from, and changing it: full weights or LoRA adapters.

Everything here runs on the engine's own loop (engines/loop_thread.py), so the state needs
no locks beyond the asyncio ones:

- A request takes a ``lease`` on the policy in force when it starts; its output carries that
  version. A change of policy closes the gate first, so no request starts half-way through.
- A full sync (``load_full``): the trainer's state dict is written to a shared weights file
  while requests still run (packed_weights.WeightsFile, in the engine's dtype), then vLLM is
  paused (``settings.sync_pause``), every worker loads the file by name
  (vllm_worker.RllmWorkerExtension), the prefix cache is reset (its KV blocks were computed
  with the old weights) and generation resumes.
- A LoRA sync (``load_lora``) registers the adapter with vLLM as a new adapter id; new
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


class PolicyState:
    def __init__(self, engine: Any, settings: Any) -> None:
        self._engine = engine
        self._settings = settings
        self.current = Policy(version=0)
        self._gate: asyncio.Event | None = None  # made on the engine's loop, on first use
        self._change = None  # asyncio.Lock, likewise
        self._in_use: Counter[int] = Counter()  # running requests per LoRA id
        self._weights_file = None  # packed_weights.WeightsFile, kept between syncs

    @property
    def version(self) -> int:
        return self.current.version

    def _sync_objects(self) -> tuple[asyncio.Event, asyncio.Lock]:
        if self._gate is None:
            self._gate = asyncio.Event()
            self._gate.set()
            self._change = asyncio.Lock()
        return self._gate, self._change

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Policy]:
        """The policy a new request runs with, held until the request ends."""
        gate, _ = self._sync_objects()
        await gate.wait()
        policy = self.current
        lora_id = policy.lora_request.lora_int_id if policy.lora_request else None
        self._in_use[lora_id] += 1
        try:
            yield policy
        finally:
            self._in_use[lora_id] -= 1

    @contextlib.asynccontextmanager
    async def _gate_closed(self) -> AsyncIterator[None]:
        """Hold new requests back while the policy changes."""
        gate, _ = self._sync_objects()
        gate.clear()
        try:
            yield
        finally:
            gate.set()

    async def load_full(self, state_dict: Mapping[str, Any], version: int) -> dict[str, float]:
        _, change = self._sync_objects()
        async with change:  # one change at a time: the weights file is written in place
            started = time.perf_counter()
            weights = await asyncio.to_thread(self._write, state_dict)
            written = time.perf_counter()
            async with self._gate_closed():
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
            "pause_s": paused - written,
            "load_s": float(worker.get("load_s", 0.0)),
            "repack_s": float(worker.get("repack_s", 0.0)),
            "total_s": finished - started,
        }

    def _write(self, state_dict: Mapping[str, Any]) -> Any:
        """`state_dict` in the shared weights file, in the dtype the engine computes in."""
        from rllm_agents.engines.packed_weights import WeightsFile

        weights = weights_to_send(state_dict)
        dtype = self._engine_dtype()
        if self._weights_file is not None and self._weights_file.fits(weights):
            self._weights_file.write(weights)
        else:
            if self._weights_file is not None:
                self._weights_file.close()
            self._weights_file = WeightsFile(weights, dtype)
        return self._weights_file

    def _engine_dtype(self) -> Any:
        return self._engine.model_config.dtype

    async def load_lora(self, adapter_dir: str, version: int) -> None:
        from vllm.lora.request import LoRARequest

        if not self._settings.enable_lora:
            raise EngineError("this vLLM engine was started without LoRA (enable_lora=True)")
        request = LoRARequest(f"policy-v{version}", _lora_id(version), adapter_dir)
        _, change = self._sync_objects()
        async with change:
            if not await self._engine.add_lora(request):
                raise EngineError(f"vLLM could not load the LoRA adapter in {adapter_dir}")
            self.current = Policy(version=version, lora_request=request)  # for new requests
            await self._remove_unused_adapters()

    async def _remove_unused_adapters(self) -> None:
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
