"""Frozen models that play seats of a multi-agent run: copies of the policy, or other models.

They are made when the trainer starts, before any update (and before a resume loads later
weights), so ``frozen`` is the starting policy for the whole run. Their weights never get a
gradient: ``requires_grad`` is off and the optimizer never sees them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rllm_train.config import ConfigError
from rllm_train.native import checkpoint
from rllm_train.native.models import frozen_copy
from rllm_train.native.multiagent_setup import FROZEN, FROZEN_CHECKPOINT, OTHER_MODEL


@dataclass
class FrozenModel:
    model: Any
    tokenizer: Any


def _with_checkpoint(policy: Any, path: str) -> Any:
    copy = frozen_copy(policy)
    # The copy's parameters no longer require a gradient: what the checkpoint must hold is
    # what the policy trains.
    weights = torch.load(checkpoint.checkpoint_file(path), map_location="cpu", weights_only=False)
    missing = checkpoint.missing_tensors(policy, weights["model"])
    if missing:
        raise ConfigError(
            f"multiagent.seats: checkpoint {path!r} lacks {len(missing)} of the trained "
            "model's tensors (a checkpoint of another model?)"
        )
    copy.load_state_dict(weights["model"], strict=False)
    return copy


def _other_model(name: str, device: torch.device) -> tuple[Any, Any]:
    from rllm_agents.models import load_model, load_tokenizer

    model = load_model(name, device=str(device), dtype=torch.float32)
    model.requires_grad_(False)
    return model.eval(), load_tokenizer(name)


def load_frozen_models(
    names: list[str], policy: Any, tokenizer: Any, device: torch.device
) -> dict[str, FrozenModel]:
    """A frozen model for each policy name in `names` (``frozen``, ``frozen:<path>``,
    ``model:<name>``); `policy` is the trained model, still at its starting weights."""
    models = {}
    for name in names:
        if name == FROZEN:
            models[name] = FrozenModel(frozen_copy(policy), tokenizer)
        elif name.startswith(FROZEN_CHECKPOINT):
            path = name.removeprefix(FROZEN_CHECKPOINT)
            models[name] = FrozenModel(_with_checkpoint(policy, path), tokenizer)
        elif name.startswith(OTHER_MODEL):
            models[name] = FrozenModel(*_other_model(name.removeprefix(OTHER_MODEL), device))
        else:
            raise ValueError(f"{name!r} is not a frozen model policy")
    return models
