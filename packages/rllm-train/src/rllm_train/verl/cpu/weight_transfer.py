"""verl's weight transfer between separate trainer and rollout processes, through Ray's object store.

verl's asynchronous trainers (``experimental/one_step_off_policy``, ``fully_async_policy``) keep
the trainer and the rollout on separate resources and move each update with a *checkpoint
engine*. The ones verl ships need an accelerator: its default, ``nccl``, imports cupy and
allocates its buckets on the GPU (``verl/checkpoint_engine/nccl_checkpoint_engine.py:23,172``);
the others need RDMA libraries or Ascend NPUs. This engine does the same job with what every
Ray cluster has: the trainer's first rank puts the weights into the object store in buckets,
and every rollout worker reads them from there and hands them, as named tensors, to its
rollout's ``update_weights`` (rllm's :class:`~rllm_train.verl.cpu.rollout.LocalEngineWeightSync`).

verl loads it through its own hook, ``actor_rollout_ref.rollout.checkpoint_engine.
custom_backend_module`` (imported before the backend is looked up), and selects it by
:data:`BACKEND_NAME`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from rllm_train.verl.weight_mailbox import WeightsMailbox

BACKEND_NAME = "rllm_object_store"


async def bucketed(
    named_tensors: AsyncIterator[tuple[str, torch.Tensor]], bucket_bytes: int
) -> AsyncIterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive runs of `named_tensors` of at most `bucket_bytes` each (a larger tensor alone).

    Buckets bound what a reader holds at once besides what it has already loaded, as verl's
    own engines bound their transfer buffers.
    """
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    async for name, tensor in named_tensors:
        if bucket and size + tensor.nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += tensor.nbytes
    if bucket:
        yield bucket


async def kept_by_sender(weights, is_sender: bool) -> AsyncIterator[tuple[str, torch.Tensor]]:
    """Walk the trainer's weights on every rank (gathering sharded parameters is collective);
    only the sender keeps them, as CPU copies."""
    async for name, tensor in ensure_async_iterator(weights):
        if is_sender:
            yield name, host_copy(tensor)


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy that owns its memory (the trainer's buffer may change after)."""
    return tensor.detach().to("cpu", copy=True).contiguous()


@CheckpointEngineRegistry.register(BACKEND_NAME)
class ObjectStoreCheckpointEngine(CheckpointEngine):
    """verl's checkpoint-engine protocol over Ray's object store.

    One instance lives in each trainer rank (``is_master`` on rank 0, the only sender) and in
    each rollout worker (a reader). Per transfer, verl calls ``prepare`` on all of them,
    ``build_topology`` with what they returned, ``init_process_group`` with its result, then
    ``send_weights`` and ``receive_weights`` concurrently, then ``finalize``.
    """

    def __init__(self, bucket_size: int, is_master: bool = False, **_: Any) -> None:
        if bucket_size < 1:
            raise ValueError(f"bucket_size must be positive, got {bucket_size}")
        self.bucket_size = bucket_size
        self.is_master = is_master
        self._mailbox = None  # the sender's, created on its first transfer
        self._readers = 0

    def prepare(self) -> dict[str, Any]:
        if not self.is_master:
            return {}
        if self._mailbox is None:
            # Owned by the trainer's first rank: it lives exactly as long as the sender does.
            self._mailbox = ray.remote(WeightsMailbox).options(num_cpus=0).remote()
        return {"mailbox": self._mailbox}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        mailboxes = [meta["mailbox"] for meta in metadata[:actor_wg_world_size] if meta]
        if len(mailboxes) != 1:
            raise RuntimeError(
                f"expected exactly one sending trainer rank, found {len(mailboxes)}: only the "
                "trainer's rank 0 is the master of a weight transfer"
            )
        mailbox = mailboxes[0]
        actor_kwargs = {
            "mailbox": [mailbox] * actor_wg_world_size,
            "readers": [rollout_world_size] * actor_wg_world_size,
        }
        rollout_kwargs = {
            "mailbox": [mailbox] * rollout_world_size,
            "readers": [rollout_world_size] * rollout_world_size,
        }
        return actor_kwargs, rollout_kwargs

    def init_process_group(self, mailbox, readers: int, **_: Any) -> None:
        self._mailbox, self._readers = mailbox, readers

    def finalize(self) -> None:
        # The mailbox drops each version when its last reader has taken it; nothing to free.
        return None

    async def send_weights(self, weights, global_steps: int | None = None) -> dict[str, Any]:
        tensors = kept_by_sender(weights, self.is_master)
        bucket_refs = [ray.put(bucket) async for bucket in bucketed(tensors, self.bucket_size)]
        if self.is_master:
            await self._mailbox.post.remote(global_steps, bucket_refs, self._readers)
        return {}

    async def receive_weights(
        self, global_steps: int | None = None
    ) -> AsyncIterator[tuple[str, torch.Tensor]]:
        version, bucket_refs = await self._mailbox.collect.remote()
        if global_steps is not None and version is not None and version != global_steps:
            raise RuntimeError(
                f"rollout worker expected the weights of step {global_steps}, the trainer sent "
                f"step {version}"
            )
        for ref in bucket_refs:
            for name, tensor in await ref:
                yield name, tensor


__all__ = ["BACKEND_NAME", "ObjectStoreCheckpointEngine", "bucketed", "host_copy", "kept_by_sender"]
