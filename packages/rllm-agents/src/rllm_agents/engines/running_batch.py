"""The running batch of `LocalEngine`: sequences decoding together over one padded KV cache.

Rows are left-padded to a common cache length; ``attention`` marks real tokens (1) and padding
(0), and each row's position ids count only its real tokens, so padding changes no result.
Every row has one *pending* token, sampled but not yet fed to the model; a decode step feeds
all pending tokens at once.

Continuous batching needs three cache operations, all plain tensor work on transformers'
``DynamicCache`` layers (``keys``/``values`` of shape rows × heads × length × dim):

- :func:`prefill` runs new prompts (their common prefix once, then the left-padded rest) and
  returns their own batch;
- :func:`merge` joins two batches, left-padding the shorter cache;
- :func:`keep` drops finished or cancelled rows and trims padding no row needs any more;
- :func:`release` is told when a batch is over (nothing to do here; a model with batch
  operations of its own, such as ``llamacpp_batch``, keeps finished sequences as a cache).

Caches that are not a list of plain full-attention layers (sliding windows, quantised or
static caches) cannot be merged this way; such a batch is marked ``compactable = False`` and
the engine falls back to static batching for it (no joins, rows leave when all are done).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any


@dataclass
class RunningBatch:
    rows: list[Any]  # the engine's per-request state, one per batch row
    cache: Any  # the model's KV cache
    attention: Any  # rows × cache length, 1 on real tokens
    pending: Any  # rows, the sampled tokens not yet in the cache
    compactable: bool

    @property
    def size(self) -> int:
        return len(self.rows)


# Below this many shared leading tokens a separate prefix pass costs more than it saves.
MIN_SHARED_PREFIX = 8


def prefill(
    model: Any, prompts: list[list[int]], pad_id: int, device: Any
) -> tuple[Any, Any, Any, bool]:
    """Run new prompts; returns (cache, attention, last-position logits, compactable).

    Prompts that start alike (the same system prompt and instructions, as parallel agents'
    prompts do) have that common prefix computed once and its cache shared, then only their
    own suffixes run, left-padded against each other. Padding then sits between the prefix and
    a suffix, which the attention mask and per-row position ids make invisible.
    """
    import torch

    shared = _common_prefix_length(prompts)
    if len(prompts) < 2 or shared < MIN_SHARED_PREFIX:
        return _prefill_padded(model, prompts, pad_id, device, None, 0)
    prefix = torch.tensor([prompts[0][:shared]], dtype=torch.long, device=device)
    out = model(input_ids=prefix, use_cache=True, **_last_logits_only(model))
    cache = out.past_key_values
    if not _compactable(cache, shared):
        return _prefill_padded(model, prompts, pad_id, device, None, 0)
    for layer in _layers(cache):
        layer.keys = layer.keys.expand(len(prompts), -1, -1, -1).contiguous()
        layer.values = layer.values.expand(len(prompts), -1, -1, -1).contiguous()
    return _prefill_padded(model, [p[shared:] for p in prompts], pad_id, device, cache, shared)


def _prefill_padded(
    model: Any, prompts: list[list[int]], pad_id: int, device: Any, cache: Any, cached: int
) -> tuple[Any, Any, Any, bool]:
    """Left-padded prompts on top of `cached` real tokens per row already in `cache`."""
    import torch

    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), cached + width), dtype=torch.long)
    attention[:, :cached] = 1
    for i, prompt in enumerate(prompts):
        input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention[i, cached + width - len(prompt) :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    # A row's positions count its real tokens only, wherever the padding sits.
    positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, cached:]
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        **_last_logits_only(model),
    )
    cache = out.past_key_values
    logits = out.logits[:, -1, :].float()
    return cache, attention, logits, _compactable(cache, cached + width)


def _last_logits_only(model: Any) -> dict[str, int]:
    # Only the last position's logits are sampled from; over a 50k vocabulary the LM head on
    # every prompt token is a fifth of a prefill's work. Older models lack the argument.
    accepts = "logits_to_keep" in inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if accepts else {}


def _common_prefix_length(prompts: list[list[int]]) -> int:
    """Leading tokens all prompts share, leaving each at least one token of its own."""
    first = prompts[0]
    limit = min(len(p) for p in prompts) - 1
    length = 0
    while length < limit and all(p[length] == first[length] for p in prompts):
        length += 1
    return length


def decode(model: Any, batch: RunningBatch) -> Any:
    """Feed every row's pending token; returns the next-token logits (rows × vocab)."""
    import torch

    # A row's next position is the number of real tokens it already has.
    positions = batch.attention.sum(-1, keepdim=True)
    batch.attention = torch.cat([batch.attention, batch.attention.new_ones((batch.size, 1))], -1)
    out = model(
        input_ids=batch.pending[:, None],
        attention_mask=batch.attention,
        position_ids=positions,
        past_key_values=batch.cache,
        use_cache=True,
    )
    batch.cache = out.past_key_values
    return out.logits[:, -1, :].float()


def merge(first: RunningBatch, second: RunningBatch) -> RunningBatch:
    """One batch with the rows of both (both must be compactable)."""
    import torch

    width = max(first.attention.shape[1], second.attention.shape[1])
    for mine, theirs in zip(_layers(first.cache), _layers(second.cache), strict=True):
        mine.keys = torch.cat([_pad_left(mine.keys, width), _pad_left(theirs.keys, width)])
        mine.values = torch.cat([_pad_left(mine.values, width), _pad_left(theirs.values, width)])
    return RunningBatch(
        rows=first.rows + second.rows,
        cache=first.cache,
        attention=torch.cat(
            [_pad_left(first.attention, width, dim=1), _pad_left(second.attention, width, dim=1)]
        ),
        pending=torch.cat([first.pending, second.pending]),
        compactable=True,
    )


def keep(batch: RunningBatch, indices: list[int]) -> RunningBatch:
    """The batch reduced to `indices` (a compactable batch), without padding columns no row uses."""
    import torch

    index = torch.tensor(indices, dtype=torch.long, device=batch.attention.device)
    attention = batch.attention.index_select(0, index)
    used = attention.any(dim=0).nonzero()
    start = int(used[0]) if len(used) else attention.shape[1]
    for layer in _layers(batch.cache):
        layer.keys = layer.keys.index_select(0, index)[:, :, start:]
        layer.values = layer.values.index_select(0, index)[:, :, start:]
    return RunningBatch(
        rows=[batch.rows[i] for i in indices],
        cache=batch.cache,
        attention=attention[:, start:],
        pending=batch.pending.index_select(0, index),
        compactable=True,
    )


def release(batch: RunningBatch) -> None:
    """The batch is over; its cache is simply dropped with it."""


def _pad_left(tensor: Any, width: int, dim: int = 2) -> Any:
    import torch

    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def _layers(cache: Any) -> list[Any]:
    return list(cache.layers)


def _compactable(cache: Any, width: int) -> bool:
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return False
    layers = getattr(cache, "layers", None)
    if not layers:
        return False
    # Exact type: subclasses (sliding windows, quantised layers) keep other state in step.
    return all(
        type(layer) is DynamicLayer
        and layer.keys is not None
        and layer.keys.dim() == 4
        and layer.keys.shape[2] == width
        for layer in layers
    )
