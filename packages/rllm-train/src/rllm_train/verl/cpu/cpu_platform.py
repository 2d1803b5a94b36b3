"""``PlatformCPU``: verl's platform interface answered for a machine with no accelerator.

verl 0.9.1 registers cuda, npu and rocm only and falls back to cuda when none is found, so a
CPU run needs a platform of its own (selected with ``VERL_PLATFORM=cpu``). Ray still schedules
verl's workers on ``GPU`` resources: the CPU mode's Ray cluster declares one logical GPU per
training process (see :mod:`rllm_train.verl.cpu.runner`), which no code ever touches.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType
from typing import Any

from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

from rllm_train.verl.cpu.device import CpuDeviceModule

PLATFORM_NAME = "cpu"


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    def __init__(self) -> None:
        self._device_module = CpuDeviceModule()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return self._device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: a GPU machine must keep cuda; CPU mode names it explicitly.
        return False

    def current_device(self):
        # verl hands this to torch as a device (`.to(get_device_id())`); a bare 0 would mean
        # the first accelerator, so the CPU's answer is the CPU device itself.
        import torch

        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the logical GPUs; nothing reads it

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
