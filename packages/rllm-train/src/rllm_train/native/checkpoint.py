"""Atomic checkpoints: a run killed at any moment (even ``kill -9``) resumes from the last one.

A checkpoint is a directory ``checkpoints/step_<N>`` written under a temporary name and renamed
into place, then ``checkpoints/latest`` (a one-line file, itself replaced atomically) points to
it. It holds the trainable weights, the optimizer, every RNG state and the step counter (which
also fixes the data order: each step's task seeds derive from the step number), and the run's
metrics rows up to its step: a resume gives back from them any row ``metrics.jsonl`` lost
(a line cut short, or one moved aside by ``--repair``), since those steps never play again.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rllm_agents.run_folder import (
    fault_point,
    fsync_file,
    fsync_folder,
    mine_or_orphaned,
    owned_temp_name,
    write_atomic,
)

LATEST = "latest"
STATE_FILE = "state.pt"


@dataclass
class TrainState:
    step: int  # steps completed
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    value_head: dict[str, torch.Tensor] | None
    rng: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. RAE's per-role baselines
    metrics_rows: list[dict[str, Any]] = field(default_factory=list)  # the run's, to this step


def rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def trainable_state(model) -> dict[str, torch.Tensor]:
    """Only what training changes (LoRA adapters alone when LoRA is on)."""
    names = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    return {
        name: tensor.detach().cpu() for name, tensor in model.state_dict().items() if name in names
    }


def save(directory: Path, state: TrainState, keep: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step_{state.step}"
    # The staging name records its owner: only this process (or a cleanup after its death)
    # may remove it, never a concurrent run's cleanup.
    staging = directory / owned_temp_name(final.name)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    payload = {
        "step": state.step,
        "model": state.model,
        "optimizer": state.optimizer,
        "value_head": state.value_head,
        "rng": state.rng,
        "extra": state.extra,
        "metrics_rows": state.metrics_rows,
    }
    torch.save(payload, staging / STATE_FILE)
    fsync_file(staging / STATE_FILE)
    fault_point("checkpoint_write", state.step)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    fsync_folder(directory)
    write_atomic(directory / LATEST, final.name + "\n")
    fault_point("after_latest", state.step)
    _prune(directory, keep)
    return final


def _prune(directory: Path, keep: int) -> None:
    finished = sorted(
        (path for path in directory.glob("step_*") if path.is_dir()),
        key=lambda path: int(path.name.removeprefix("step_")),
    )
    for old in finished[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for leftover in directory.glob(".step_*.tmp-*"):  # from a run killed while saving
        if mine_or_orphaned(leftover.name):
            shutil.rmtree(leftover, ignore_errors=True)


def load_latest(directory: Path) -> TrainState | None:
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    path = directory / pointer.read_text(encoding="utf-8").strip() / STATE_FILE
    payload = torch.load(path, map_location="cpu", weights_only=False)
    return TrainState(
        step=int(payload["step"]),
        model=payload["model"],
        optimizer=payload["optimizer"],
        value_head=payload["value_head"],
        rng=payload["rng"],
        extra=payload.get("extra", {}),
        metrics_rows=payload.get("metrics_rows", []),  # none in checkpoints from before them
    )


def checkpoint_file(path: str | Path) -> Path:
    """The checkpoint file `path` names: a run's output dir or its ``checkpoints/`` dir (the
    latest checkpoint), a ``checkpoints/step_N`` dir, or the ``state.pt`` file itself."""
    root = Path(path)
    for pointer in (root / "checkpoints" / LATEST, root / LATEST):
        if pointer.is_file():
            return pointer.parent / pointer.read_text(encoding="utf-8").strip() / STATE_FILE
    for candidate in (root / STATE_FILE, root):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no trainer checkpoint at {str(path)!r} (give a run's output dir, its checkpoints/ "
        "dir or a checkpoints/step_N dir)"
    )


def missing_tensors(model, weights: dict[str, torch.Tensor]) -> set[str]:
    """The model's trained tensors that `weights` lacks (a checkpoint of another model, or
    of LoRA adapters for a full model, or the reverse)."""
    return set(trainable_state(model)) - set(weights)


def load_weights(model, path: str | Path) -> int:
    """Load the trained weights of the checkpoint at `path` (see :func:`checkpoint_file`) into
    `model`; returns the step it was saved at. A ValueError if it lacks any trained tensor."""
    payload = torch.load(checkpoint_file(path), map_location="cpu", weights_only=False)
    missing = missing_tensors(model, payload["model"])
    if missing:
        raise ValueError(
            f"checkpoint {str(path)!r} lacks {len(missing)} of the model's trained tensors (a "
            "checkpoint of another model, or of LoRA adapters where none are trained?)"
        )
    model.load_state_dict(payload["model"], strict=False)
    return int(payload["step"])


# The trained policy at the end of a run, as a Hugging Face model folder: OUTPUT/model.
FINAL_MODEL_FOLDER = "model"


def save_final_model(model: Any, tokenizer: Any, folder: Path) -> Path:
    """The policy's weights alone (no optimizer state, no RNG: what the checkpoints keep for
    --resume), with its tokenizer, where ``rllm-eval --model`` and ``--model`` of a new run
    load them. A LoRA's adapters are merged into a copy first, so the folder is a plain model.
    Written under a temporary name and renamed, like the checkpoints."""
    import copy

    plain = copy.deepcopy(model).merge_and_unload() if hasattr(model, "merge_and_unload") else model
    staging = folder.with_name(owned_temp_name(folder.name))
    shutil.rmtree(staging, ignore_errors=True)
    plain.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(staging, folder)
    return folder
