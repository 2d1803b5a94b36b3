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


def layout(state_dict: Mapping[str, Any], dtype: Any = None) -> tuple[tuple[Slot, ...], int]:
    """Where each tensor of `state_dict` goes in one buffer (as `dtype` when given), and the
    buffer's size in bytes. Tensors that share their memory (tied weights) are placed once."""
    slots, placed, end = [], {}, 0
    for name, tensor in state_dict.items():
        stored = dtype or tensor.dtype
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
        if key not in placed:
            placed[key] = end
            end += -(-tensor.numel() * _element_size(stored) // ALIGNMENT) * ALIGNMENT
        slots.append(Slot(name, stored, tuple(tensor.shape), placed[key]))
    return tuple(slots), end


def pack(state_dict: Mapping[str, Any]) -> PackedWeights:
    """`state_dict` copied into one fresh buffer (shared memory when on a CPU). Tensors that
    share their memory (tied weights) are stored once; the caller's tensors are only read."""
    import torch

    slots, size = layout(state_dict)
    device = next((tensor.device for tensor in state_dict.values()), "cpu")
    buffer = torch.empty(size, dtype=torch.uint8, device=device)
    if buffer.device.type == "cpu":
        buffer.share_memory_()
    packed = PackedWeights(buffer, slots)
    _copy_in(packed, state_dict)
    return packed


def _copy_in(packed: PackedWeights, state_dict: Mapping[str, Any]) -> None:
    import torch

    with torch.no_grad():
        for slot, tensor in zip(packed.slots, state_dict.values(), strict=True):
            view(packed, slot).copy_(tensor.detach())


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


class WeightsFile:
    """A packed state dict in a file (on /dev/shm when it has room), for a process that can
    map it but shares no Python objects with us: a vLLM worker, reached by an RPC whose
    arguments must be plain strings (``path`` and ``table()``, the slots as JSON).

    The file is written in place at every sync while the layout stays the same: its pages
    are allocated once, and a reader that keeps its mapping (``map_file``) pays no page
    faults again. Close it (or use it as a context manager) to remove the file.
    """

    def __init__(self, state_dict: Mapping[str, Any], dtype: Any = None) -> None:
        import tempfile

        import torch

        self.dtype = dtype
        self.slots, size = layout(state_dict, dtype)
        handle, created = tempfile.mkstemp(prefix="rllm-weights-", dir=_shared_directory(size))
        self._handle: int | None = handle
        self.path = _held_open_path(handle, created)
        try:
            self._packed = PackedWeights(
                torch.from_file(self.path, shared=True, size=size, dtype=torch.uint8),
                self.slots,
            )
            _copy_in(self._packed, state_dict)
        except BaseException:
            self.close()
            raise

    def fits(self, state_dict: Mapping[str, Any]) -> bool:
        """Whether `state_dict` has this file's layout (same names, shapes and ties)."""
        return layout(state_dict, self.dtype)[0] == self.slots

    def write(self, state_dict: Mapping[str, Any]) -> None:
        """Overwrite the file with `state_dict`, which must have the file's layout."""
        if not self.fits(state_dict):
            raise ValueError("the state dict's names or shapes differ from the weights file's")
        _copy_in(self._packed, state_dict)

    def table(self) -> str:
        return slots_to_json(self.slots)

    def close(self) -> None:
        import os

        if self._handle is not None:
            os.close(self._handle)
            self._handle = None
        try:
            os.unlink(self.path)  # still named only where /proc is missing
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            pass

    def __enter__(self) -> WeightsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def slots_to_json(slots: tuple[Slot, ...]) -> str:
    import json

    return json.dumps(
        [[s.name, str(s.dtype).removeprefix("torch."), list(s.shape), s.offset] for s in slots]
    )


def slots_from_json(table: str) -> tuple[Slot, ...]:
    import json

    import torch

    return tuple(
        Slot(name, getattr(torch, dtype), tuple(shape), offset)
        for name, dtype, shape, offset in json.loads(table)
    )


def map_file(path: str, table: str) -> dict[str, Any]:
    """The state dict a ``WeightsFile`` holds, as views into a shared mapping of the file
    (no copy; the reader only reads)."""
    import os

    import torch

    size = os.path.getsize(path)
    buffer = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
    return unpack(PackedWeights(buffer, slots_from_json(table)))


def _held_open_path(handle: int, created: str) -> str:
    """A path to the open file `handle` that outlives its name: on Linux the name is removed
    at once and readers open ``/proc/<pid>/fd/<handle>``, so the file (half a gigabyte of
    /dev/shm for a small model) goes with the last process holding it, a trainer killed with
    SIGKILL included. Elsewhere the name stays until ``close``."""
    import os

    by_descriptor = f"/proc/{os.getpid()}/fd/{handle}"
    if not os.path.exists(by_descriptor):
        return created
    os.unlink(created)
    return by_descriptor


def _shared_directory(size: int) -> str | None:
    """/dev/shm when it can hold `size` bytes with room to spare (a container's is often
    64 MB), else the temp directory."""
    import shutil

    try:
        if shutil.disk_usage("/dev/shm").free > 2 * size:
            return "/dev/shm"
    except OSError:
        pass
    return None
