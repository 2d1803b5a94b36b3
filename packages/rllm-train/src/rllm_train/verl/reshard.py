"""Resume a verl FSDP checkpoint with a different number of training processes.

verl saves an FSDP2 actor (and critic) as one file per rank: ``model_world_size_W_rank_R.pt``,
``optim_...`` and ``extra_state_...``, each holding that rank's shard of every parameter
(DTensors split on dim 0). Its loader opens the files of the *current* world size only, so a run
saved by 2 processes could not resume in 1 (or 4): it stopped with a FileNotFoundError from deep
inside a Ray worker.

With :func:`install`, a load whose saved world size (``fsdp_config.json``) differs from the
current one regathers instead: every rank reads all the saved shards, joins each tensor along
dim 0 in rank order (FSDP2's even split), and hands its own new shard to the model and the
optimizer (``distribute_tensor`` on the current mesh). The learning-rate schedule comes from
rank 0's extra state; each new rank takes the random state of saved rank ``R mod W``. A load
with the same world size is verl's own, unchanged.

Regathering holds one full copy of the model and its optimizer state in host memory per
process, once, at start-up.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)
SAVED_CONFIG = "fsdp_config.json"  # verl writes the saving world size here


class ReshardError(RuntimeError):
    """A checkpoint that cannot be regathered (missing shards, an unknown sharding)."""


def saved_world_size(folder: Path) -> int | None:
    """The number of processes that saved the checkpoint in `folder` (None: not recorded)."""
    try:
        return int(json.loads((folder / SAVED_CONFIG).read_text())["world_size"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def shard_files(folder: Path, kind: str, world_size: int) -> list[Path]:
    """The saved files of one kind ("model", "optim", "extra_state"), in rank order."""
    paths = [
        folder / f"{kind}_world_size_{world_size}_rank_{rank}.pt" for rank in range(world_size)
    ]
    missing = [path.name for path in paths if not path.is_file()]
    if missing:
        raise ReshardError(
            f"{folder}: saved by {world_size} processes but {', '.join(missing)} is missing"
        )
    return paths


def _load(path: Path) -> Any:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def joined(shards: list[Any]) -> Any:
    """One value from its per-rank shards: DTensors split on dim 0 are joined in rank order;
    anything else (an optimizer's step count) is taken from rank 0."""
    import torch
    from torch.distributed.tensor import DTensor, Shard

    first = shards[0]
    if not isinstance(first, DTensor):
        return first
    if tuple(first.placements) != (Shard(0),):
        raise ReshardError(f"cannot regather a tensor sharded as {first.placements}")
    return torch.cat([shard.to_local() for shard in shards], dim=0)


def full_model_state(folder: Path, world_size: int) -> dict[str, Any]:
    shards = [_load(path) for path in shard_files(folder, "model", world_size)]
    return {key: joined([shard[key] for shard in shards]) for key in shards[0]}


def full_optimizer_state(folder: Path, world_size: int) -> dict[str, Any]:
    shards = [_load(path) for path in shard_files(folder, "optim", world_size)]
    state = {
        index: {name: joined([shard["state"][index][name] for shard in shards]) for name in values}
        for index, values in shards[0]["state"].items()
    }
    return {"state": state, "param_groups": shards[0]["param_groups"]}


def on_mesh_of(full: Any, like: Any) -> Any:
    """`full` as this rank's shard of a tensor laid out like `like` (a DTensor); a scalar (an
    optimizer's step count) or a value for a plain tensor as it is."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if not isinstance(like, DTensor) or not hasattr(full, "shape") or full.dim() == 0:
        return full
    if tuple(full.shape) != tuple(like.shape):
        raise ReshardError(f"a saved tensor of shape {tuple(full.shape)} for one of {like.shape}")
    return distribute_tensor(full.to(like.dtype), like.device_mesh, like.placements)


def load_model(model, full: dict[str, Any]) -> None:
    current = model.state_dict()
    unknown = sorted(set(full) - set(current))
    if unknown:
        raise ReshardError(f"the checkpoint has parameters the model lacks: {unknown[:5]}")
    model.load_state_dict(
        {key: on_mesh_of(value, current[key]) for key, value in full.items()}, strict=False
    )  # fmt: skip  (a LoRA checkpoint holds the adapter only)


def load_optimizer(optimizer, full: dict[str, Any]) -> None:
    params = [param for group in optimizer.param_groups for param in group["params"]]
    indices = [index for group in full["param_groups"] for index in group["params"]]
    if len(params) != len(indices):
        raise ReshardError(
            f"the optimizer has {len(params)} parameters, the checkpoint {len(indices)}"
        )
    by_index = dict(zip(indices, params, strict=True))
    state = {
        index: {name: on_mesh_of(value, by_index[index]) for name, value in values.items()}
        for index, values in full["state"].items()
    }
    optimizer.load_state_dict({"state": state, "param_groups": full["param_groups"]})


def load_regathered(manager, folder: Path, saved: int) -> None:
    """verl's ``FSDPCheckpointManager.load_checkpoint`` for a checkpoint of `saved` processes."""
    import torch

    if manager.rank == 0:
        logger.warning(
            "resuming %s, saved by %d training processes, with %d: regathering its shards",
            folder, saved, manager.world_size,
        )  # fmt: skip
    if manager.should_load_model:
        load_model(manager.model, full_model_state(folder, saved))
    if manager.should_load_optimizer:
        load_optimizer(manager.optimizer, full_optimizer_state(folder, saved))
    if manager.should_load_extra:
        extras = shard_files(folder, "extra_state", saved)
        schedule = _load(extras[0]).get("lr_scheduler")
        if schedule is not None and manager.lr_scheduler is not None:
            manager.lr_scheduler.load_state_dict(schedule)
        rng = _load(extras[manager.rank % saved]).get("rng")
        if rng is not None:
            manager.load_rng_state(rng)
    torch.distributed.barrier()


def regathering(load):
    """verl's loader, regathering a checkpoint saved by another number of processes."""

    @functools.wraps(load)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        saved = saved_world_size(Path(local_path)) if local_path is not None else None
        if saved is None or saved == self.world_size:
            return load(self, local_path, hdfs_path, del_local_after_load)
        return load_regathered(self, Path(local_path), saved)

    return load_checkpoint


def install() -> None:
    """Put the regathering loader in place of verl's (idempotent)."""
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    if not getattr(FSDPCheckpointManager.load_checkpoint, "__wrapped__", None):
        FSDPCheckpointManager.load_checkpoint = regathering(FSDPCheckpointManager.load_checkpoint)
