"""Loading the policy (with optional LoRA), the reference model and PPO's value head."""

from __future__ import annotations

import copy

import torch
from rllm_agents.models import load_model, load_tokenizer

from rllm_train.config import ModelConfig

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
