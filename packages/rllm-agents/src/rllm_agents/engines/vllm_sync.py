"""Weight sync into an in-process vLLM engine, through vLLM's own worker RPC.

vLLM (V1, >= 0.8) runs the model in worker processes; ``AsyncLLM.collective_rpc(method,
args=...)`` runs `method` on every worker, a callable being called with the worker as its first
argument. Each worker's ``model_runner.model.load_weights(weights)`` takes (HF name, tensor)
pairs and does vLLM's own renaming, sharding across tensor-parallel ranks and fusing (q/k/v into
qkv_proj, gate/up into gate_up_proj), so the trainer sends plain HF names. Afterwards the prefix
cache is reset: KV blocks computed with the old weights must not be reused.

Tensors travel pickled through the RPC channel: fine for models up to a few billion parameters
on one node; larger ones want vLLM's NCCL weight-transfer path, as verl uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def weight_items(state_dict: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(HF name, tensor) pairs as vLLM's ``load_weights`` takes them.

    Detached and contiguous on the CPU (a CUDA tensor of the trainer's process cannot cross
    into vLLM's workers by pickle); buffers vLLM computes itself (rotary inv_freq) are left out.
    """
    return [
        (name, tensor.detach().to("cpu").contiguous())
        for name, tensor in state_dict.items()
        if not name.endswith("rotary_emb.inv_freq")
    ]


def load_weights_on_worker(worker: Any, items: list[tuple[str, Any]]) -> int:
    """Runs inside each vLLM worker (via collective_rpc): load `items` into its model."""
    worker.model_runner.model.load_weights(weights=items)
    return len(items)


async def load_into_vllm(engine: Any, state_dict: Mapping[str, Any]) -> None:
    """Load a merged HF state dict into every worker of `engine` (a vLLM AsyncLLM)."""
    await engine.collective_rpc(load_weights_on_worker, args=(weight_items(state_dict),))
    await engine.reset_prefix_cache()
