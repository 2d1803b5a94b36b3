"""A ``torch.<device>``-style module for the CPU, as verl's platform layer expects one.

verl calls its device module for memory, streams, RNG state and synchronisation
(``get_torch_device().empty_cache()`` and the like). ``torch.cpu`` answers the stream and
device calls; this module adds the rest with their honest CPU meaning: the RNG state is the
CPU generator's, memory figures come from the process, and calls that manage accelerator
memory do nothing because there is none to manage. Anything else is an AttributeError naming
the call, so a CUDA-only step in verl shows up instead of passing silently.
"""

from __future__ import annotations

import resource
from types import ModuleType

import torch
import torch.cpu


def _nothing(*_args, **_kwargs) -> None:
    """A call that manages accelerator memory: there is none on a CPU."""


def _zero(*_args, **_kwargs) -> int:
    return 0


def _peak_rss_bytes(*_args, **_kwargs) -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _mem_get_info(*_args, **_kwargs) -> tuple[int, int]:
    """(free, total) bytes of the machine's memory, as cuda's (free, total) of the card."""
    import os

    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def _device_name(*_args, **_kwargs) -> str:
    return "cpu"


# Name -> what it is on a CPU. torch.cpu supplies the rest (streams, device count, ...).
CPU_DEVICE_CALLS = {
    "empty_cache": _nothing,
    "ipc_collect": _nothing,
    "set_per_process_memory_fraction": _nothing,
    "reset_peak_memory_stats": _nothing,
    "memory_allocated": _zero,
    "memory_reserved": _zero,
    "max_memory_reserved": _zero,
    "max_memory_allocated": _peak_rss_bytes,
    "mem_get_info": _mem_get_info,
    "get_device_name": _device_name,
    "get_rng_state": lambda *_a, **_k: torch.get_rng_state(),
    "set_rng_state": lambda state, *_a, **_k: torch.set_rng_state(state),
    "manual_seed": torch.manual_seed,
    "manual_seed_all": torch.manual_seed,
    "is_initialized": lambda: True,
}


class CpuDeviceModule(ModuleType):
    """``torch.cpu`` plus :data:`CPU_DEVICE_CALLS`; unknown calls fail with their name."""

    def __init__(self) -> None:
        super().__init__("rllm_cpu_device", __doc__)
        for name, call in CPU_DEVICE_CALLS.items():
            setattr(self, name, call)

    def __getattr__(self, name: str):
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        raise AttributeError(
            f"verl called torch.<device>.{name}, which has no CPU meaning in rllm's CPU mode; "
            "this step of verl needs a GPU"
        )
