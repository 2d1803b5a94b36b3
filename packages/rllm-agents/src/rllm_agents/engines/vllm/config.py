"""How big a vLLM engine is and where it runs: settings with defaults for the machine.

On the CPU build vLLM does not size itself the way it does on a GPU: its KV cache is a fixed
amount of memory (``kv_cache_gib``; without it vLLM reserves a fraction of *all* the machine's
memory and refuses to start when that much is not free), its worker's OpenMP threads are
bound to cores (``cpu_cores``, vLLM's ``VLLM_CPU_OMP_THREADS_BIND``; its own choice keeps one
core for the engine's scheduler) and compiling the model (``torch.compile``) costs minutes,
so ``enforce_eager`` is on.

vLLM's CPU platform also runs the model in a worker process of its own, which the engine core
process starts and which imports torch and vLLM a third time. With one worker
(``worker_in_engine_core``) the model runs in the engine core instead: on 2 cores a start took
43 s instead of 55 s at the same speed (83 and 81 tokens/s over 32 chats).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.engines.vllm.worker import EXTENSION

SYNC_PAUSE_MODES = ("wait", "abort", "keep")
# What keeps the model inside vLLM's engine core process (worker_in_engine_core): its one-process
# executor, and multiprocessing off, without which vLLM's CPU platform turns "uni" back into a
# worker process. The switch only changes vLLM's synchronous LLM class otherwise: AsyncLLM's
# engine core is a process either way.
ENGINE_CORE_EXECUTOR = "uni"
ENGINE_CORE_ENVIRONMENT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@dataclass(frozen=True)
class VLLMSettings:
    """What a VLLMEngine asks vLLM for. Unknown keywords go to vLLM's engine args as given."""

    dtype: str = "auto"
    max_model_len: int | None = 4096
    max_num_seqs: int = 256
    seed: int = 0
    on_cpu: bool = False
    # GPU: the fraction of its memory vLLM may take. CPU: unused (kv_cache_gib sizes it).
    gpu_memory_utilization: float = 0.85
    kv_cache_gib: float | None = None
    cpu_cores: str | None = None  # e.g. "0-1"; None: vLLM's own binding
    enforce_eager: bool = False
    # The model runs in vLLM's engine core process, not in a worker process it starts.
    worker_in_engine_core: bool = False
    enable_lora: bool = False
    max_lora_rank: int = 16
    max_loras: int = 2  # the adapter serving now and the one before it, still finishing
    # What a full weight sync does to requests running when it starts (see VLLMEngine).
    sync_pause: str = "wait"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sync_pause not in SYNC_PAUSE_MODES:
            raise ValueError(
                f"sync_pause must be one of {SYNC_PAUSE_MODES}, got {self.sync_pause!r}"
            )
        if self.kv_cache_gib is not None and self.kv_cache_gib <= 0:
            raise ValueError(f"kv_cache_gib must be positive, got {self.kv_cache_gib}")

    @classmethod
    def for_this_machine(cls) -> VLLMSettings:
        """Defaults for the platform vLLM finds here (its CPU build or a GPU)."""
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return cls()
        return cls(
            on_cpu=True,
            dtype=cpu_dtype(),
            kv_cache_gib=2.0,
            enforce_eager=True,
            worker_in_engine_core=True,
            cpu_cores=all_usable_cores(),
        )

    def replace(self, **overrides: Any) -> VLLMSettings:
        """These settings with `overrides`; names that are not settings go to ``extra``."""
        known = {f.name for f in dataclasses.fields(self)} - {"extra"}
        extra = {**self.extra, **{k: v for k, v in overrides.items() if k not in known}}
        return dataclasses.replace(
            self, **{k: v for k, v in overrides.items() if k in known}, extra=extra
        )

    def engine_args(self) -> dict[str, Any]:
        """Keyword arguments for vLLM's ``AsyncEngineArgs`` (the model aside)."""
        args: dict[str, Any] = {
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "seed": self.seed,
            "enforce_eager": self.enforce_eager,
            # log_softmax(logits / T) of the sampled token: what the trainer scores.
            "logprobs_mode": "processed_logprobs",
            "worker_extension_cls": EXTENSION,
            "disable_log_stats": True,
        }
        if self.on_cpu:
            args["kv_cache_memory_bytes"] = int((self.kv_cache_gib or 2.0) * 2**30)
            # A prompt read in pieces (chunked prefill) discards the token sampled after each
            # piece and rewinds the request's random generator, which a CPU generator cannot
            # do: vLLM 0.30's CPU build then dies ("CPU Generator does not use offset",
            # v1/worker/gpu_model_runner.py:3723) as soon as a seeded request's prompt is
            # split. Whole prompts only, with room for the longest.
            args["enable_chunked_prefill"] = False
            args["max_num_batched_tokens"] = max(self.max_model_len or 8192, 4096)
        else:
            args["gpu_memory_utilization"] = self.gpu_memory_utilization
            if self.kv_cache_gib is not None:
                args["kv_cache_memory_bytes"] = int(self.kv_cache_gib * 2**30)
        if self.worker_in_engine_core:
            args["distributed_executor_backend"] = ENGINE_CORE_EXECUTOR
        if self.enable_lora:
            args.update(
                enable_lora=True, max_lora_rank=self.max_lora_rank, max_loras=self.max_loras
            )
        return {**args, **self.extra}


def cli_args(engine_args: dict[str, Any]) -> list[str]:
    """`engine_args` as ``vllm serve`` flags: ``--max-model-len 2048``, ``--enforce-eager``
    for True, ``--no-enable-chunked-prefill`` for False (vLLM's negation of a switch; dropping
    the flag instead would leave a switch that is on by default on), nothing for None."""
    flags: list[str] = []
    for name, value in engine_args.items():
        flag = name.replace("_", "-")
        if value is True:
            flags.append(f"--{flag}")
        elif value is False:
            flags.append(f"--no-{flag}")
        elif value is not None:
            flags += [f"--{flag}", str(value)]
    return flags


def all_usable_cores() -> str | None:
    """This process's cores as vLLM's binding list ("0,1"): the worker's OpenMP threads on
    every one of them. None for a single core (vLLM's own binding then)."""
    if hasattr(os, "sched_getaffinity"):
        cores = sorted(os.sched_getaffinity(0))
    else:
        cores = list(range(os.cpu_count() or 1))
    return ",".join(map(str, cores)) if len(cores) > 1 else None


def cpu_dtype() -> str:
    """bfloat16 where the CPU computes in it (AVX-512 BF16 or AMX: vLLM's kernels pack it);
    float32 elsewhere, where vLLM's bfloat16 matmuls fall back to slow conversions."""
    import torch

    fast_bf16 = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return "bfloat16" if fast_bf16 else "float32"


def environment_for(settings: VLLMSettings) -> dict[str, str]:
    """Variables vLLM's processes read at start, as `settings` want them."""
    wanted = {}
    if settings.on_cpu and settings.cpu_cores:
        # str(): "1" given on a command line may arrive parsed as the number 1.
        wanted["VLLM_CPU_OMP_THREADS_BIND"] = str(settings.cpu_cores)
    if settings.worker_in_engine_core:
        wanted.update(ENGINE_CORE_ENVIRONMENT)
    return wanted


@contextlib.contextmanager
def engine_environment(settings: VLLMSettings) -> Iterator[None]:
    """The environment vLLM's child processes read at start (set for the start only; the
    caller's own values win)."""
    wanted = environment_for(settings)
    saved = {name: os.environ.get(name) for name in wanted}
    for name, value in wanted.items():
        os.environ.setdefault(name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
