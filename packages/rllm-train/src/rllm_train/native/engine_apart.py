"""The engine that plays training episodes when it is not the trained model itself.

In synchronous local training the sampler serves the very model being trained, so every
rollout sees the last update with no copy. Two set-ups need an engine apart, fed new weights
after each update:

* ``rollout.mode=async`` with ``rollout.engine=local``: a LocalEngine on a frozen copy of the
  policy, on the same device. The copy generates the next steps' episodes while the trained
  model is being updated; weights are swapped in with ``LocalEngine.update_weights``, between
  two batches of decoding, so the copy never serves half-loaded weights.
* ``rollout.engine=process`` (sync or async): the same LocalEngine in a process of its own
  (``rllm_agents.engines.process.engine``), so generation has its own interpreter and, on a CPU, its
  own thread pool beside the update; weights go over in shared memory.
* ``rollout.engine=llamacpp`` (sync or async): llama.cpp on the CPU, in this process, serving the
  policy exported to an F16 GGUF after each update (``engines/llamacpp/batch.py``: LocalEngine's
  scheduling and sampling, llama.cpp's forward passes; the export is loaded between two decoding
  rounds). F16, not the shipped Q4 file: a training step moves weights by far less than a Q4
  quantisation step, so a Q4 export would serve the same policy step after step.
* ``rollout.engine=vllm`` (sync or async): vLLM (``rllm_agents.engines.vllm.engine``), its engine core
  and worker in processes of their own, on cores split from the update's in async mode; full
  weights, or a LoRA policy's adapter, loaded by name after each update (:mod:`.vllm_apart`).

``rollout.engine_replicas`` starts several engines of one of these kinds, each with its
:class:`EngineShare` of the machine, behind one router (:mod:`.replicas`).

A :class:`WeightSnapshot` is taken on the trainer's thread right after an update: the tensors
that training changes are cloned, so a push that runs later, on another thread, while the next
update changes the live weights in place, still sends the weights of that one version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from rllm_agents.engines.llamacpp.server import usable_cores
from rllm_agents.engines.local import LocalEngine
from rllm_agents.engines.weight_sync import lora_scalings, merged_state_dict

from rllm_train.config import ConfigError, TrainConfig
from rllm_train.native.models import frozen_copy

LLAMACPP_MODEL = "smollm2"  # the one model whose GGUF ships with rllm (rllm_agents.models)
MAX_LLAMACPP_SEQUENCES = 256  # llama.cpp's own limit on sequence ids in one context


@dataclass(frozen=True)
class WeightSnapshot:
    """The trained model's state dict after `version` updates, its own parameter names (peft's
    for a LoRA model), detached from the live model wherever training writes."""

    state_dict: dict[str, torch.Tensor]
    version: int


@dataclass(frozen=True)
class EngineShare:
    """Which of the run's `count` rollout replicas an engine is (``rollout.engine_replicas``,
    :mod:`.replicas`): the machine's room for the engine apart - its CPU threads, vLLM's cores
    and GPU memory - is divided among them, so two replicas do not both spin on every core."""

    index: int = 0
    count: int = 1

    def part(self, total: int) -> int:
        """This replica's part of `total` threads (at least one)."""
        return max(1, total // self.count)

    def slice(self, items: tuple[int, ...]) -> tuple[int, ...]:
        """This replica's run of `items` (cores): contiguous, the same size for every replica;
        with fewer items than replicas, replicas share one."""
        if len(items) < self.count:
            return (items[self.index % len(items)],)
        size = len(items) // self.count
        return items[self.index * size : (self.index + 1) * size]


ONE_ENGINE = EngineShare()


def snapshot_weights(model: torch.nn.Module, version: int) -> WeightSnapshot:
    """`model`'s weights now. Tensors that share memory with a trainable parameter (a tied
    ``lm_head`` included) are cloned, each storage once; frozen ones are never written by the
    optimiser, so they are passed by reference."""
    trained = {p.data_ptr() for p in model.parameters() if p.requires_grad}
    clones: dict[int, torch.Tensor] = {}
    state = {}
    for name, tensor in model.state_dict().items():
        pointer = tensor.data_ptr()
        if pointer in trained:
            if pointer not in clones:
                clones[pointer] = tensor.detach().clone()
            state[name] = clones[pointer]
        else:
            state[name] = tensor
    return WeightSnapshot(state, version)


@dataclass
class EngineApart:
    """An engine, what it is called in messages, and how a snapshot is pushed into it."""

    engine: Any
    kind: str
    push: Callable[[WeightSnapshot], None]  # the snapshot served from then on
    swaps_between_turns: bool  # new weights can arrive while episodes are in flight

    @property
    def version(self) -> int:
        return int(self.engine.policy_version)


def check_engine_apart(config: TrainConfig) -> None:
    """What can be refused before any model loads."""
    if config.rollout.engine == "vllm":
        from rllm_train.native.vllm_apart import check_vllm_config

        check_vllm_config(config)
    if config.rollout.engine == "llamacpp" and config.model.name != LLAMACPP_MODEL:
        raise ConfigError(
            f"rollout.engine=llamacpp: serves the embedded SmolLM2's GGUF, exported from the "
            f"trained weights after each update; model.name must be {LLAMACPP_MODEL}, got "
            f"{config.model.name!r}"
        )


def local_copy_engine(
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    version: int,
    max_batch_size: int,
    autocast_dtype: Any = None,
    cpu_threads: int | None = None,
) -> EngineApart:
    """A LocalEngine on a copy of `model` as it is now: the weights after `version` updates.
    On a CPU its worker uses `cpu_threads` intra-op threads (None: every core)."""
    copy = frozen_copy(model)
    device = next(model.parameters()).device
    engine = LocalEngine(
        copy,
        tokenizer,
        device=str(device),
        max_batch_size=max_batch_size,
        autocast_dtype=autocast_dtype,
        cpu_threads=cpu_threads if device.type == "cpu" else None,
    )
    engine.policy_version = version

    def push(snapshot: WeightSnapshot) -> None:
        engine.update_weights(snapshot.state_dict, version=snapshot.version)

    return EngineApart(engine, "local copy", push, swaps_between_turns=True)


def llamacpp_engine(
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    version: int,
    shipped: bool,
    max_batch_size: int,
    seed: int,
    threads: int | None = None,
) -> EngineApart:
    """A LocalEngine whose forward passes run in llama.cpp, in this process, on an F16 copy of
    the shipped GGUF (``engines/llamacpp/batch.py``: its sequences decode in one batch, and a
    finished turn's cells serve the next turn as a prefix), then on `model`'s weights (after
    `version` updates) unless they are still the `shipped` ones. llama.cpp's kernels release
    the interpreter lock, so it decodes beside the update on its own `threads`."""
    try:
        from rllm_agents.engines.llamacpp.batch import LlamaCppModel
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ConfigError(
            "rollout.engine=llamacpp: llama-cpp-python is not installed: "
            "pip install 'rllm-agents[smollm2]'"
        ) from exc
    from rllm_agents.engines.llamacpp.gguf_retype import f16_copy
    from rllm_agents.models import smollm2_gguf_path

    served = LlamaCppModel(
        f16_copy(smollm2_gguf_path()),
        threads=threads,
        # Finished conversations stay cached beside the running ones, for their next turn.
        max_sequences=min(MAX_LLAMACPP_SEQUENCES, max(2 * max_batch_size, 8)),
    )
    engine = LocalEngine(served, tokenizer, max_batch_size=max_batch_size, seed=seed)
    engine.policy_version = version
    scalings = lora_scalings(model)

    def push(snapshot: WeightSnapshot) -> None:
        # llama.cpp is given merged weights: a LoRA policy is served as one matrix per layer.
        engine.update_weights(
            merged_state_dict(snapshot.state_dict, scalings), version=snapshot.version
        )

    apart = EngineApart(engine, "llama.cpp", push, swaps_between_turns=True)
    if not shipped:
        try:
            apart.push(snapshot_weights(model, version))
        except BaseException:
            engine.close()
            raise
    return apart


def process_engine(
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    version: int,
    max_batch_size: int,
    seed: int,
    autocast_dtype: Any = None,
    cpu_threads: int | None = None,
) -> EngineApart:
    """A LocalEngine in a process of its own (``ProcessEngine``) on `model` as it is now: the
    weights after `version` updates. A LoRA policy is served merged, as llama.cpp serves it."""
    from rllm_agents.engines.process.engine import ProcessEngine

    device = next(model.parameters()).device
    engine = ProcessEngine(
        model,
        tokenizer,
        device=str(device),
        max_batch_size=max_batch_size,
        seed=seed,
        cpu_threads=cpu_threads if device.type == "cpu" else None,
        autocast_dtype=autocast_dtype,
        version=version,
    )
    scalings = lora_scalings(model)

    def push(snapshot: WeightSnapshot) -> None:
        engine.update_weights(
            merged_state_dict(snapshot.state_dict, scalings), version=snapshot.version
        )

    return EngineApart(engine, "process", push, swaps_between_turns=True)


def vllm_engine(
    config: TrainConfig,
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    version: int,
    max_batch_size: int,
    share: EngineShare = ONE_ENGINE,
) -> EngineApart:
    """vLLM serving `model`'s weights after `version` updates (see :mod:`.vllm_apart`): started
    from ``model.name``'s own files, then given the trained weights unless they are still those
    (a LoRA policy: its adapter, over the base weights). One of several replicas (`share`)
    binds its own run of vLLM's cores, or takes its part of the GPU memory vLLM may use."""
    from rllm_agents.engines.vllm.config import VLLMSettings
    from rllm_agents.engines.vllm.engine import VLLMEngine

    from rllm_train.native import vllm_apart

    settings = VLLMSettings.for_this_machine()
    options = vllm_apart.engine_settings(config, max_batch_size)
    if settings.on_cpu:
        split = vllm_apart.split_cores(config)
        options.setdefault("cpu_cores", split.binding(share.slice(split.engine)))
        threads = vllm_apart.trainer_threads(config, split)
        if threads and next(model.parameters()).device.type == "cpu":
            torch.set_num_threads(threads)  # the update on the cores vLLM left
    elif share.count > 1:
        options.setdefault("gpu_memory_utilization", settings.gpu_memory_utilization / share.count)
    try:
        engine = VLLMEngine(config.model.name, tokenizer=tokenizer, settings=settings, **options)
    except (TypeError, ValueError) as error:  # settings vLLM refuses
        raise ConfigError(f"rollout.engine=vllm: vLLM refused its settings: {error}") from error
    lora = config.model.lora_rank > 0
    pusher = vllm_apart.VLLMPusher(engine, model, lora=lora)

    def push(snapshot: WeightSnapshot) -> None:
        pusher.push(snapshot.state_dict, snapshot.version)

    apart = EngineApart(engine, "vLLM", push, swaps_between_turns=True)
    try:
        if lora and config.model.init_from:
            pusher.push_base(snapshot_weights(model, version).state_dict, version)
        if version > 0 or config.model.init_from:
            apart.push(snapshot_weights(model, version))
    except BaseException:
        engine.close()
        pusher.close()
        raise
    return apart


def engine_threads(config: TrainConfig, share: EngineShare = ONE_ENGINE) -> int | None:
    """The CPU threads of the engine apart, or of one replica of it (None: torch's default,
    every core).

    A LocalEngine in its own process defaults to half the cores: left at every core, it and
    the trainer would each spin a thread per core, and on a small machine the two pools then
    preempt each other mid-kernel. Replicas divide the engine's threads among them for the
    same reason."""
    threads = config.rollout.engine_threads
    if not threads and config.rollout.engine == "process":
        threads = max(1, usable_cores() // 2)
    if not threads and share.count > 1:
        threads = usable_cores()
    return share.part(threads) if threads else None


# What each rollout.engine value starts: (config, model, tokenizer, version, max batch size,
# autocast dtype, share) -> the engine apart, serving the weights after `version` updates.
ENGINES_APART: dict[str, Callable[..., EngineApart]] = {
    "local": lambda config, model, tokenizer, version, batch, autocast, share: local_copy_engine(
        model,
        tokenizer,
        version=version,
        max_batch_size=batch,
        autocast_dtype=autocast,
        cpu_threads=engine_threads(config, share),
    ),
    "process": lambda config, model, tokenizer, version, batch, autocast, share: process_engine(
        model,
        tokenizer,
        version=version,
        max_batch_size=batch,
        seed=config.trainer.seed,
        autocast_dtype=autocast,
        cpu_threads=engine_threads(config, share),
    ),
    "llamacpp": lambda config, model, tokenizer, version, batch, autocast, share: llamacpp_engine(
        model,
        tokenizer,
        version=version,
        shipped=version == 0 and not config.model.init_from,
        max_batch_size=config.rollout.engine_slots or batch,
        seed=config.trainer.seed,
        threads=engine_threads(config, share),
    ),
    "vllm": lambda config, model, tokenizer, version, batch, autocast, share: vllm_engine(
        config, model, tokenizer, version=version, max_batch_size=batch, share=share
    ),
}


def start_engine_apart(
    config: TrainConfig,
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    version: int,
    max_batch_size: int,
    autocast_dtype: Any = None,
    share: EngineShare = ONE_ENGINE,
) -> EngineApart:
    """The engine `config.rollout.engine` names, serving `model`'s current weights, which are
    those after `version` updates; `share`: which replica it is (:mod:`.replicas` starts
    ``rollout.engine_replicas`` of them)."""
    start = ENGINES_APART[config.rollout.engine]
    return start(config, model, tokenizer, version, max_batch_size, autocast_dtype, share)
