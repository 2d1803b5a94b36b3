"""Weights that can be loaded again into a running vLLM on the CPU (a vLLM general plugin).

Why: vLLM's CPU build repacks the weight of every linear layer for its GEMM kernels once the
checkpoint is loaded (``dispatch_cpu_unquantized_gemm`` in vllm/model_executor/layers/utils.py)
and then replaces ``layer.weight`` with an empty parameter that has no ``weight_loader``. A
second ``model.load_weights(...)`` - a trainer's weight sync, ours or verl's - then fails
("Attempted to load weight ... into parameter (torch.Size([0]))", or "'Parameter' object has
no attribute 'weight_loader'"). Layers that keep their weight (the embedding / LM head) do
take new values, but their packed copy, which the logits are computed from, goes stale.

How: vLLM loads every entry point of the ``vllm.general_plugins`` group in each of its
processes (front end, engine core and every worker, vllm/plugins/__init__.py) before a model
is built. ``register`` (this package's entry point) does nothing unless the platform is the
CPU. There it wraps ``dispatch_cpu_unquantized_gemm`` so that:

1. the layer keeps its unpacked weight parameter, ``weight_loader`` included, so a later
   ``load_weights`` finds the parameter vLLM created, at its full shape;
2. that parameter's loader is wrapped: loading new values into it marks every layer packed
   from it (a tied LM head shares the embedding's parameter) as stale by swapping the layer's
   ``cpu_linear`` for a one-shot function;
3. the first forward through a stale layer packs its weight again (the original dispatch)
   and runs the freshly packed kernel. A fused layer (q/k/v, gate/up) is loaded shard by
   shard but packed once.

So every loading route works unchanged: ``model.load_weights`` through ``collective_rpc``,
vLLM's ``reload_weights``, and verl's bucketed sync (which also calls vLLM's
``process_weights_after_loading`` itself; packing again there is harmless). Nothing needs to
know the plugin is present.

Cost: the unpacked linear weights stay in memory beside the packed ones (about twice the
model's linear weights: 0.27 GB more for the 135M model in bf16). Set ``RLLM_VLLM_CPU_RELOAD=0``
to turn the plugin off for an engine whose weights never change. GPU builds are untouched.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SWITCH = "RLLM_VLLM_CPU_RELOAD"  # "0" turns the plugin off
_MARK = "_rllm_reloadable"  # set on the functions this module wraps, so wrapping is idempotent


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0"


def register() -> None:
    """The ``vllm.general_plugins`` entry point: make CPU-packed weights reloadable."""
    if not enabled():
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    import vllm.model_executor.layers.utils as layer_utils

    if getattr(layer_utils.dispatch_cpu_unquantized_gemm, _MARK, False):
        return  # already in place (vLLM loads plugins once per process; be safe anyway)
    layer_utils.dispatch_cpu_unquantized_gemm = reloadable_dispatch(
        layer_utils.dispatch_cpu_unquantized_gemm
    )


def reloadable_dispatch(dispatch: Callable[..., None]) -> Callable[..., None]:
    """`dispatch` (vLLM's CPU GEMM set-up for one layer) made to keep the weight and to pack
    it again after new values are loaded into it."""

    def keep_and_watch(layer: Any, remove_weight: bool = False) -> None:
        del remove_weight  # always kept: the next load needs the parameter
        dispatch(layer, remove_weight=False)
        weight = getattr(layer, "weight", None)
        if weight is None or weight.is_meta or not hasattr(layer, "cpu_linear"):
            return
        _watch_loads(weight, layer, dispatch)

    setattr(keep_and_watch, _MARK, True)
    keep_and_watch.__wrapped__ = dispatch  # type: ignore[attr-defined]
    return keep_and_watch


def _watch_loads(weight: Any, layer: Any, dispatch: Callable[..., None]) -> None:
    """Wrap `weight`'s loader (once) so that a load marks `layer` (and any other layer packed
    from the same parameter) stale."""
    loader = getattr(weight, "weight_loader", None)
    if loader is None:
        return
    layers = getattr(loader, "_rllm_layers", None)
    if layers is None:
        layers = weakref.WeakSet()
        weight.weight_loader = _marking_loader(loader, layers, dispatch)
    layers.add(layer)


def _marking_loader(
    loader: Callable[..., Any], layers: weakref.WeakSet, dispatch: Callable[..., None]
) -> Callable[..., Any]:
    def load_and_mark(*args: Any, **kwargs: Any) -> Any:
        result = loader(*args, **kwargs)
        for layer in list(layers):
            layer.cpu_linear = StaleLinear(weakref.ref(layer), dispatch)
        return result

    load_and_mark._rllm_layers = layers  # type: ignore[attr-defined]
    # vLLM's layerwise reload reads the loader's signature (inspect follows __wrapped__).
    load_and_mark.__wrapped__ = loader  # type: ignore[attr-defined]
    return load_and_mark


@dataclass(frozen=True)
class StaleLinear:
    """A layer's ``cpu_linear`` while its packed weight is out of date: packs on first use."""

    layer_ref: weakref.ref
    dispatch: Callable[..., None]

    def pack(self) -> Any:
        """Pack the layer's weight again; vLLM's dispatch installs the new ``cpu_linear``."""
        import torch

        layer = self.layer_ref()
        with torch.no_grad():
            self.dispatch(layer, remove_weight=False)
        return layer

    def __call__(self, x: Any, weight: Any, bias: Any) -> Any:
        layer = self.pack()
        return layer.cpu_linear(x, layer.weight, bias)


def repack_stale(model: Any) -> int:
    """Pack every stale layer of `model` now rather than on its next forward (the worker
    extension calls this after a sync, so the first request does not pay for it). Returns
    how many layers were packed."""
    stale = [
        layer.__dict__["cpu_linear"]
        for layer in model.modules()
        if isinstance(layer.__dict__.get("cpu_linear"), StaleLinear)
    ]
    for linear in stale:
        linear.pack()
    return len(stale)
