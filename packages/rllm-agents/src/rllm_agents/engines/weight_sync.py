"""What a trainer hands an inference engine after an update: the policy's weights and version.

The contract, for every engine that samples for a trainer it does not share memory with::

    engine.update_weights(state_dict, version=v)   # blocks until new requests see v
    engine.policy_version                          # the version it samples from now
    output.policy_version                          # the version that generated one output

A version is the number of optimiser updates behind the weights (0 = the initial model). It
travels from each ``ModelOutput`` into ``Step.info["policy_version"]``, where the trainer's
rollout correction reads how stale a sample is.

Weights go over as one full, merged Hugging Face state dict: a LoRA-trained policy is merged
here, on the trainer's side (``merged_state_dict``), so an engine never needs the adapter
library or its naming; engines that store weights quantised (llama.cpp) must see the merged
weights anyway.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

POLICY_VERSION = "policy_version"  # the Step / Trajectory info key the trainer reads


@dataclass(frozen=True)
class PolicyWeights:
    """A full HF state dict (merged, unprefixed names) and the version it is."""

    state_dict: Mapping[str, Any]
    version: int

    @classmethod
    def from_model(cls, model: Any, version: int) -> PolicyWeights:
        """The weights of `model` (a plain HF model or a peft-wrapped one, adapters merged)."""
        return cls(merged_state_dict(model.state_dict(), lora_scalings(model)), version)


# peft's names inside a wrapped model: base_model.model.<hf name>, and for an adapted linear
# <module>.base_layer.weight plus <module>.lora_A.<adapter>.weight / lora_B.<adapter>.weight.
_PEFT_PREFIX = "base_model.model."
_LORA_KEY = re.compile(r"(.+)\.lora_([AB])\.([^.]+)\.weight")


def lora_scalings(model: Any) -> dict[str, float]:
    """alpha / r of each adapter of a peft model ({} for a plain model)."""
    configs = getattr(model, "peft_config", None) or {}
    scalings = {}
    for name, config in configs.items():
        rank = config.r
        alpha = config.lora_alpha
        use_rslora = getattr(config, "use_rslora", False)
        scalings[name] = alpha / (rank**0.5) if use_rslora else alpha / rank
    return scalings


def merged_state_dict(
    state_dict: Mapping[str, Any], scalings: Mapping[str, float]
) -> dict[str, Any]:
    """`state_dict` with every LoRA pair folded into its base weight and peft's names undone.

    W' = W + scaling * B @ A, the same sum peft's ``merge_and_unload`` computes, without
    touching the model being trained. A plain HF state dict comes back unchanged (a copy).
    """
    merged: dict[str, Any] = {}
    factors: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in state_dict.items():
        match = _LORA_KEY.fullmatch(key)
        if match:
            module, which, adapter = match.groups()
            factors.setdefault((module, adapter), {})[which] = value
            continue
        merged[_hf_name(key.replace(".base_layer.", "."))] = value
    for (module, adapter), pair in factors.items():
        if set(pair) != {"A", "B"} or adapter not in scalings:
            raise ValueError(f"incomplete LoRA adapter {adapter!r} on {module}")
        weight_name = _hf_name(f"{module}.weight")
        base = merged[weight_name]
        delta = (pair["B"].to(base.dtype) @ pair["A"].to(base.dtype)) * scalings[adapter]
        merged[weight_name] = base.detach() + delta.detach()
    return merged


def _hf_name(key: str) -> str:
    return key[len(_PEFT_PREFIX) :] if key.startswith(_PEFT_PREFIX) else key


def record_policy_version(info: MutableMapping[str, Any], output: Any) -> None:
    """Copy the version that generated `output` (a ModelOutput) into a Step's info, if known."""
    version = getattr(output, POLICY_VERSION, None)
    if version is not None:
        info[POLICY_VERSION] = version


async def sync_weights(engine: Any, weights: PolicyWeights) -> None:
    """Push `weights` into `engine`, whichever kind its ``update_weights`` is.

    LocalEngine's and llama.cpp's block (a swap waits for running sequences; an export and a
    restart take seconds), so they run on a thread, off the event loop; vLLM's is a coroutine.
    """
    import asyncio
    import inspect

    update = engine.update_weights
    if inspect.iscoroutinefunction(update):
        await update(weights.state_dict, version=weights.version)
    else:
        await asyncio.to_thread(update, weights.state_dict, version=weights.version)
