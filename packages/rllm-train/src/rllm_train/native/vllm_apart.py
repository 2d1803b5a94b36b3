"""vLLM as the engine apart (``rollout.engine=vllm``): its cores, its start, and weight pushes.

vLLM runs its engine core and its worker in processes of its own, so generation has its own
interpreters and, on a CPU, its own OpenMP threads beside the update. Those threads are bound
to cores (vLLM's ``VLLM_CPU_OMP_THREADS_BIND``) and spin between kernels, so in asynchronous
mode the cores are split: vLLM takes the last ``rollout.engine_threads`` of this process's cores
(half of them by default), and the update keeps the rest (``trainer.cpu_threads``, when not set
by the user). In synchronous mode they take turns, and vLLM gets every core.

After each update the policy goes over by name (``VLLMEngine.update_weights``: a shared weights
file each worker loads through the worker extension, the prefix cache reset); a LoRA policy goes
over as its adapter instead (``VLLMEngine.load_lora``: a new adapter version, the base weights
untouched), written as peft's ``save_pretrained`` would write it. Every output carries the
version it started under.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rllm_train.config import ConfigError, TrainConfig

# vLLM serves adapters up to a rank it fixes at start, one of these (vllm/config/lora.py).
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
ADAPTERS_KEPT = 2  # the adapter serving now and the one before it (requests may still use it)


@dataclass(frozen=True)
class CoreSplit:
    """This process's cores, split between vLLM's worker and the update."""

    engine: tuple[int, ...]
    trainer: tuple[int, ...]

    def binding(self, cores: tuple[int, ...] | None = None) -> str:
        """vLLM's binding list ("1" or "0,1"): of the engine's cores, or of `cores` (one
        replica's run of them, ``EngineShare.slice``)."""
        return ",".join(map(str, self.engine if cores is None else cores))


def usable_core_ids() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def split_cores(config: TrainConfig) -> CoreSplit:
    """The cores vLLM binds its worker's threads to, and those left to the update.

    ``rollout.engine_threads`` cores for vLLM, the last ones; by default every core in
    synchronous mode (generation and the update take turns) and half of them in asynchronous
    mode (they run at once, and two thread pools spinning on the same cores slow each other
    down far more than either loses by having fewer cores)."""
    cores = usable_core_ids()
    wanted = config.rollout.engine_threads
    if not wanted:
        wanted = len(cores) if config.rollout.mode == "sync" else max(1, len(cores) // 2)
    if wanted > len(cores):
        raise ConfigError(
            f"rollout.engine_threads: {wanted} cores asked for vLLM, this process may use "
            f"{len(cores)}"
        )
    engine = tuple(cores[len(cores) - wanted :])
    rest = tuple(core for core in cores if core not in engine)
    return CoreSplit(engine, rest or engine)


def check_vllm_config(config: TrainConfig) -> None:
    """What can be refused before any model loads: vLLM missing, a model whose heads its CPU
    build has no kernel for, an adapter rank above what it serves."""
    from importlib.util import find_spec

    from rllm_agents.engines.vllm.engine import INSTALL_HINT
    from rllm_agents.models import resolve_model

    from rllm_train.verl.spec import VLLM_CPU_HEAD_SIZES, VLLM_MAX_LORA_RANK, attention_head_size

    if find_spec("vllm") is None:
        raise ConfigError(f"rollout.engine=vllm: vLLM is not installed: {INSTALL_HINT}")
    if not torch.cuda.is_available():  # vLLM's CPU build
        head_size = attention_head_size(str(resolve_model(config.model.name)))
        if head_size is not None and head_size not in VLLM_CPU_HEAD_SIZES:
            raise ConfigError(
                f"rollout.engine=vllm: vLLM's CPU build has no attention kernel for heads of "
                f"size {head_size} ({config.model.name}'s); it serves "
                f"{', '.join(map(str, VLLM_CPU_HEAD_SIZES))}"
            )
    if config.model.lora_rank > VLLM_MAX_LORA_RANK:
        raise ConfigError(
            f"rollout.engine=vllm: model.lora_rank {config.model.lora_rank} is above the "
            f"largest rank vLLM serves ({VLLM_MAX_LORA_RANK})"
        )


def served_lora_rank(rank: int) -> int:
    """The smallest rank vLLM can be started with that serves adapters of `rank`."""
    return next(allowed for allowed in VLLM_LORA_RANKS if allowed >= rank)


def engine_settings(config: TrainConfig, max_batch_size: int) -> dict[str, Any]:
    """VLLMEngine keywords for this run: its seed, its cores, LoRA when the policy has
    adapters, then ``rollout.engine_options`` over all of them."""
    settings: dict[str, Any] = {
        "seed": config.trainer.seed,
        "max_num_seqs": max(max_batch_size, 1),
        "max_model_len": config.rollout.max_prompt_tokens + config.rollout.max_response_tokens,
    }
    if config.model.lora_rank > 0:
        settings.update(enable_lora=True, max_lora_rank=served_lora_rank(config.model.lora_rank))
    return {**settings, **config.rollout.engine_options}


def trainer_threads(config: TrainConfig, split: CoreSplit) -> int | None:
    """The update's intra-op threads beside vLLM: ``trainer.cpu_threads`` when set, else the
    cores vLLM left in asynchronous mode (None: unchanged, every core)."""
    if config.trainer.cpu_threads or config.rollout.mode == "sync":
        return None
    return len(split.trainer)


class AdapterWriter:
    """Writes each version's LoRA adapter into a folder vLLM loads it from, as peft's
    ``save_pretrained`` does (``adapter_config.json``, ``adapter_model.safetensors``), keeping
    the last ``ADAPTERS_KEPT`` and removing the folder on close."""

    def __init__(self, model: Any) -> None:
        self._model = model  # the peft model: its adapter config and naming
        self.root = Path(tempfile.mkdtemp(prefix="rllm-vllm-adapters-"))
        self._written: list[Path] = []
        # Removed on close, or when the writer is dropped, or at exit, whichever comes first.
        self._remove = weakref.finalize(self, shutil.rmtree, str(self.root), True)

    def write(self, state_dict: dict[str, torch.Tensor], version: int) -> Path:
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        adapter = get_peft_model_state_dict(self._model, state_dict=state_dict)
        folder = self.root / f"v{version}"
        folder.mkdir(exist_ok=True)
        save_file(
            {name: tensor.detach().contiguous() for name, tensor in adapter.items()},
            str(folder / "adapter_model.safetensors"),
        )
        self._model.peft_config["default"].save_pretrained(str(folder))
        self._written.append(folder)
        while len(self._written) > ADAPTERS_KEPT:
            shutil.rmtree(self._written.pop(0), ignore_errors=True)
        return folder

    def close(self) -> None:
        self._remove()


def base_weights(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A peft state dict's base weights under their HF names (the adapters left out)."""
    from rllm_agents.engines.weight_sync import merged_state_dict

    return merged_state_dict({k: v for k, v in state_dict.items() if ".lora_" not in k}, {})


class VLLMPusher:
    """Pushes weight snapshots into a VLLMEngine from plain threads (the player's, the
    pusher's): the full state dict, or a LoRA policy's adapter."""

    def __init__(self, engine: Any, model: Any, lora: bool) -> None:
        self.engine = engine
        self.adapters = AdapterWriter(model) if lora else None
        self.seconds: list[float] = []  # each push, for the record

    def push(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        started = time.perf_counter()
        if self.adapters is None:
            asyncio.run(self.engine.update_weights(state_dict, version=version))
        else:
            folder = self.adapters.write(state_dict, version)
            asyncio.run(self.engine.load_lora(str(folder), version=version))
        self.seconds.append(time.perf_counter() - started)

    def push_base(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """The base weights of a LoRA policy that does not start from the served model's
        (``model.init_from``): loaded once, the adapters go on top of them."""
        asyncio.run(self.engine.update_weights(base_weights(state_dict), version=version))

    def close(self) -> None:
        if self.adapters is not None:
            self.adapters.close()
