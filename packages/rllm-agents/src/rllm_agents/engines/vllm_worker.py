"""Methods mixed into vLLM's worker (``worker_extension_cls``) that our engines call by name.

``collective_rpc("rllm_load_weights_file", args=(path, table))`` runs a method on every worker.
Its arguments are two strings, so the call goes through vLLM's own channel unchanged - from
``AsyncLLM`` in-process, or from the OpenAI server's ``/collective_rpc`` endpoint, which passes
only strings - and no function or object is pickled (vLLM's insecure-serialisation flag stays
off). The weights themselves lie in a file the trainer wrote (packed_weights.WeightsFile, on
/dev/shm): the worker maps it once and, at each sync, copies every tensor into the model.
"""

from __future__ import annotations

import time
from typing import Any

EXTENSION = "rllm_agents.engines.vllm_worker.RllmWorkerExtension"


class RllmWorkerExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker."""

    def rllm_load_weights_file(self, path: str, table: str) -> dict[str, float]:
        """Load the (HF name, tensor) pairs packed in `path` (slots described by `table`)
        into the model: vLLM renames, fuses and shards them. On the CPU build the layers
        whose weights changed are packed for its kernels again here, not on the next
        request. Returns the count and the seconds each part took."""
        from rllm_agents.engines.vllm_cpu_reload import repack_stale

        started = time.perf_counter()
        weights = self._rllm_mapped(path, table)
        model = self.model_runner.model  # type: ignore[attr-defined]
        model.load_weights(weights=list(weights.items()))
        loaded = time.perf_counter()
        repacked = repack_stale(model)
        return {
            "tensors": len(weights),
            "load_s": loaded - started,
            "repacked_layers": repacked,
            "repack_s": time.perf_counter() - loaded,
        }

    def _rllm_mapped(self, path: str, table: str) -> dict[str, Any]:
        """The file's tensors, mapped once per (path, table): later syncs reuse the mapping,
        whose pages are already in place."""
        from rllm_agents.engines.packed_weights import map_file

        key = (path, table)
        cached = self.__dict__.get("_rllm_weights_map")
        if cached is None or cached[0] != key:
            cached = (key, map_file(path, table))
            self.__dict__["_rllm_weights_map"] = cached
        return cached[1]
