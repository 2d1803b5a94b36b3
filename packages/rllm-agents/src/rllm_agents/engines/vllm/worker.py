"""Methods mixed into vLLM's worker (``worker_extension_cls``) that our engines call by name.

``collective_rpc("rllm_load_weights_file", args=(path, table))`` runs a method on every worker.
Its arguments are two strings, so the call goes through vLLM's own channel unchanged - from
``AsyncLLM`` in-process, or from the OpenAI server's ``/collective_rpc`` endpoint, which passes
only strings - and no function or object is pickled (vLLM's insecure-serialisation flag stays
off). The weights themselves lie in a file the trainer wrote (packed_weights.WeightsFile, on
/dev/shm): the worker maps it once and, at each sync, copies every tensor into the model.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

EXTENSION = "rllm_agents.engines.vllm.worker.RllmWorkerExtension"


class RllmWorkerExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker."""

    def rllm_load_weights_file(self, path: str, table: str) -> dict[str, float]:
        """Load the (HF name, tensor) pairs packed in `path` (slots described by `table`)
        into the model: vLLM renames, fuses and shards them. On the CPU build the layers
        whose weights changed are packed for its kernels again here, not on the next
        request. Returns the count and the seconds each part took."""
        from rllm_agents.engines.vllm.cpu_reload import repack_stale

        started = time.perf_counter()
        weights = self._rllm_mapped(path, table)
        model = self.model_runner.model  # type: ignore[attr-defined]
        with base_layers_in_place(model):
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
        """The file's tensors, mapped once per file and table: later syncs reuse the mapping,
        whose pages are already in place. The inode is part of the key, as a path of the form
        /proc/<pid>/fd/<n> may name a new file once the old one is closed."""
        import os

        from rllm_agents.engines.packed_weights import map_file

        key = (path, os.stat(path).st_ino, table)
        cached = self.__dict__.get("_rllm_weights_map")
        if cached is None or cached[0] != key:
            cached = (key, map_file(path, table))
            self.__dict__["_rllm_weights_map"] = cached
        return cached[1]


@contextlib.contextmanager
def base_layers_in_place(model: Any) -> Iterator[None]:
    """`model` with its LoRA wrappers swapped back for the layers they wrap, for the length
    of a load.

    With LoRA enabled vLLM replaces each adapted layer by a wrapper whose own parameters
    live under ``base_layer``; the model's ``load_weights`` then no longer finds HF names
    such as ``model.embed_tokens.weight``. The base layers are the same objects inside and
    outside the wrappers, so loading into them changes what the wrappers compute.
    """
    import torch
    from vllm.lora.layers import BaseLayerWithLoRA

    swapped = []
    for name, module in list(model.named_modules()):
        base = getattr(module, "base_layer", None)
        if isinstance(module, BaseLayerWithLoRA) and isinstance(base, torch.nn.Module):
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, base)
            swapped.append((parent, child, module))
    try:
        yield
    finally:
        for parent, child, wrapper in reversed(swapped):
            setattr(parent, child, wrapper)
