"""A state dict packed into one buffer, to hand to another process in one piece.

Sending a state dict tensor by tensor through torch's multiprocessing reducers shares each
storage on its own: a file descriptor per tensor, each fetched by the receiver over an
authenticated connection of its own. For a model of a few hundred tensors that costs seconds.
Packed, the weights are one byte buffer in shared memory (or one CUDA allocation, sent by IPC
handle) plus a table of where each tensor lies in it, so the handover is one descriptor and
one copy on each side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ALIGNMENT = 64  # bytes: every tensor starts on a cache line, whatever its dtype


@dataclass(frozen=True)
class Slot:
    """Where one tensor lies in the buffer."""

    name: str
    dtype: Any  # torch.dtype
    shape: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class PackedWeights:
    buffer: Any  # a 1-D uint8 tensor: shared memory on a CPU
    slots: tuple[Slot, ...]


def pack(state_dict: Mapping[str, Any]) -> PackedWeights:
    """`state_dict` copied into one fresh buffer (shared memory when on a CPU). Tensors that
    share their memory (tied weights) are stored once; the caller's tensors are only read."""
    import torch

    slots, placed, end = [], {}, 0
    device = None
    for name, tensor in state_dict.items():
        device = device or tensor.device
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
        if key not in placed:
            placed[key] = end
            end += -(-tensor.numel() * tensor.element_size() // ALIGNMENT) * ALIGNMENT
        slots.append(Slot(name, tensor.dtype, tuple(tensor.shape), placed[key]))
    buffer = torch.empty(end, dtype=torch.uint8, device=device or "cpu")
    if buffer.device.type == "cpu":
        buffer.share_memory_()
    packed = PackedWeights(buffer, tuple(slots))
    with torch.no_grad():
        for slot, tensor in zip(slots, state_dict.values(), strict=True):
            view(packed, slot).copy_(tensor.detach())
    return packed


def unpack(packed: PackedWeights) -> dict[str, Any]:
    """The state dict, as views into the packed buffer (no copy)."""
    return {slot.name: view(packed, slot) for slot in packed.slots}


def view(packed: PackedWeights, slot: Slot) -> Any:
    import math

    size = math.prod(slot.shape) * _element_size(slot.dtype)
    raw = packed.buffer[slot.offset : slot.offset + size]
    return raw.view(slot.dtype).view(slot.shape)


def _element_size(dtype: Any) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()
