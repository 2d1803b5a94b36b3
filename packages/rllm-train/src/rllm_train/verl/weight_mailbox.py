"""The meeting point of one weight transfer: a small Ray actor holding object references.

Kept apart from :mod:`~rllm_train.verl.cpu.weight_transfer`, and outside the ``cpu`` package
(whose import loads verl and torch), so that the actor's process starts at once and imports
nothing heavy: it never touches a tensor, only the references to the buckets the trainer put
into Ray's object store.
"""

from __future__ import annotations

import asyncio
from typing import Any


class WeightsMailbox:
    """One posted weight version at a time, handed to a known number of readers.

    The trainer posts a version's bucket references with the number of rollout workers that
    will read them; each reader takes them once, and when the last one has, the mailbox lets go
    of them (the readers' own references keep the buckets alive until they are loaded). Readers
    that come before the post wait for it. verl runs one transfer at a time and waits for every
    reader before the next, so a post never overwrites one still being read.
    """

    def __init__(self) -> None:
        self._posted: tuple[int | None, list[Any]] | None = None
        self._readers_left = 0
        self._changed = asyncio.Condition()

    async def post(self, version: int | None, bucket_refs: list[Any], readers: int) -> None:
        if readers < 1:
            raise ValueError(f"a weight transfer needs at least one reader, got {readers}")
        async with self._changed:
            if self._posted is not None:
                raise RuntimeError(
                    f"weights version {self._posted[0]} is still being read by "
                    f"{self._readers_left} rollout worker(s); transfers must not overlap"
                )
            self._posted, self._readers_left = (version, bucket_refs), readers
            self._changed.notify_all()

    async def collect(self) -> tuple[int | None, list[Any]]:
        async with self._changed:
            await self._changed.wait_for(lambda: self._posted is not None)
            posted = self._posted
            self._readers_left -= 1
            if self._readers_left == 0:
                self._posted = None
            return posted
