"""Loading the policy (with optional LoRA), the reference model and PPO's value head, and
everything a training run holds of them (:func:`load_for_training`)."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from rllm_agents.models import load_model, load_tokenizer

from rllm_train.config import ConfigError, ModelConfig, TrainConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"trainer.device={requested!r} but no CUDA GPU is visible")
    return device


def pick_dtype(requested: str, device: torch.device) -> torch.dtype:
    if requested == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[requested]


def load_policy(config: ModelConfig, device: torch.device):
    """(policy, tokenizer, compute dtype): the trained model, LoRA-wrapped when lora_rank > 0."""
    dtype = pick_dtype(config.dtype, device)
    tokenizer = load_tokenizer(config.name)
    # Trainable weights stay float32; bf16 on a GPU comes from autocast (see the trainer).
    model = load_model(config.name, device=str(device), dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if config.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            target_modules=list(config.lora_target_modules),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    return model, tokenizer, dtype


def frozen_copy(model):
    """The reference model for the KL penalty: a frozen copy of the starting weights."""
    reference = copy.deepcopy(model)
    reference.requires_grad_(False)
    reference.eval()
    return reference


class ValueHead(torch.nn.Module):
    """PPO's critic: a linear layer on the policy's last hidden state (a shared trunk)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.score = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.score.weight)
        torch.nn.init.zeros_(self.score.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.score(hidden.float()).squeeze(-1)


def hidden_size(model) -> int:
    config = model.config
    return int(getattr(config, "hidden_size", None) or config.get_text_config().hidden_size)


@dataclass
class TrainedModels:
    """The trained policy and what its update needs beside it."""

    device: torch.device
    model: Any
    tokenizer: Any
    autocast_dtype: torch.dtype | None  # bf16/fp16 compute on a GPU (the weights stay fp32)
    pad_id: int
    value_head: ValueHead | None  # PPO's critic
    reference: Any  # the KL reference (None: none, or LoRA's base weights)
    optimizer: torch.optim.Optimizer


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def load_for_training(config: TrainConfig, *, learns_values: bool) -> TrainedModels:
    """The policy (from ``model.init_from`` when set), PPO's value head when the algorithm
    `learns_values`, the KL reference and the optimizer (the value head's group at
    ``trainer.lr * algorithm.critic_lr_scale``)."""
    from rllm_train.native import checkpoint
    from rllm_train.native.optim import build_optimizer

    device = pick_device(config.trainer.device)
    if device.type == "cpu" and config.trainer.cpu_threads:
        torch.set_num_threads(config.trainer.cpu_threads)
    seed_everything(config.trainer.seed)
    model, tokenizer, compute_dtype = load_policy(config.model, device)
    if config.model.init_from:
        # Before the reference and any frozen player are copied: they start from it too.
        try:
            checkpoint.load_weights(model, config.model.init_from)
        except (FileNotFoundError, ValueError) as error:
            raise ConfigError(f"model.init_from: {error}") from error
    autocast = compute_dtype if device.type == "cuda" and compute_dtype != torch.float32 else None
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )
    value_head = ValueHead(hidden_size(model)).to(device) if learns_values else None
    reference = None
    if config.algorithm.kl_coef > 0 and config.model.lora_rank == 0:
        reference = frozen_copy(model)
    groups: list[dict[str, Any]] = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    if value_head is not None:  # the critic learns at its own rate
        critic_lr = config.trainer.lr * config.algorithm.critic_lr_scale
        groups.append({"params": list(value_head.parameters()), "lr": critic_lr})
    optimizer = build_optimizer(
        groups, lr=config.trainer.lr, weight_decay=config.trainer.weight_decay
    )
    return TrainedModels(
        device, model, tokenizer, autocast, pad_id, value_head, reference, optimizer
    )
