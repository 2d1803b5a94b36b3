"""The worker side of the Ray executor: `EpisodeWorker`, a long-lived async Ray actor.

A worker serves many runs. For each run the driver hands it a *setup* - a copy of the driver's
:class:`~rllm_agents.execution.AgentExecutionEngine` (agent factory, env factory, budgets,
sampling, tokenizer) whose rollout engine reaches the model over HTTP - pickled once and named
by its digest, so a run with the same setup as the last one ships nothing but the name. Each
``run_episode`` call then plays one whole episode here, with the execution engine's own
episode loop: env reset, the agent's turns against the model server, every env step, on one
of the worker's env slots (the env reused by the slot's next episode, as in-process runs do).
Only the finished Episode goes back, pickled here into one byte string (:func:`ship_episode`):
Ray's serializer visits an object tree node by node in Python and took about 1.2 ms more for a
20-turn FrozenLake episode than for the same episode as bytes (2-core machine; a whole remote
call costs about 2 ms there).

Images in observations (``Web-v0``'s screenshots) travel as lossless PNG instead of raw
arrays - a 1280x720 screenshot is 2.7 MB raw and tens of KB as PNG - and the driver turns
them back into the very same arrays (:func:`unpack_images`).

This module does not import Ray: the driver wraps the class with ``ray.remote``.
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from typing import Any

from rllm_agents.types import Episode


@dataclass(frozen=True)
class PngImage:
    """An image observation on its way from a worker to the driver."""

    png: bytes


class EpisodeWorker:
    """One actor: the run's setup, its env slots, and episodes on demand (module docstring)."""

    def __init__(self) -> None:
        self._setup_key: str | None = None
        self._runner: Any = None
        self._episodes: Any = None  # the current run's LocalEpisodes

    def where(self) -> dict[str, Any]:
        """The node and process this worker runs in (also: the worker has started)."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    async def begin(self, setup_key: str, setup: bytes | None, capacity: int) -> None:
        """Start a run: adopt the setup (``None``: the one named `setup_key` is already here)
        and open `capacity` env slots; the last run's envs are closed first."""
        if setup_key != self._setup_key:
            if setup is None:
                raise ValueError(f"worker has no setup {setup_key!r}: the driver must send it")
            from ray import cloudpickle

            self._runner, self._setup_key = cloudpickle.loads(setup), setup_key
        await self.end()
        self._episodes = self._runner.local_episodes(capacity)

    async def run_episode(
        self, index: int, task: dict[str, Any] | None, seed: int | str | None
    ) -> bytes:
        """Episode `index` of the run (`seed`: its env seed, or a workflow's uid), shipped."""
        if self._episodes is None:
            raise RuntimeError("run_episode before begin: the worker has no run open")
        return ship_episode(await self._episodes.run(index, task, seed))

    async def end(self) -> None:
        """Close the run's envs (containers, browsers), their threads and model connections."""
        episodes, self._episodes = self._episodes, None
        if episodes is not None:
            await episodes.aclose()
        engine = getattr(self._runner, "engine", None)  # a workflow's sits in its factory
        if engine is not None:
            await engine.aclose()  # reconnects on the next run's first request


def ship_episode(episode: Episode) -> bytes:
    """What a worker returns for `episode`: its images as PNG, the whole pickled at once."""
    return pickle.dumps(pack_images(episode), protocol=pickle.HIGHEST_PROTOCOL)


def receive_episode(shipped: bytes) -> Episode:
    """The driver's copy of a shipped episode, images back as arrays (the worker is the
    driver's own actor, as trusted as the pickles Ray itself moves between them)."""
    return unpack_images(pickle.loads(shipped))


def pack_images(episode: Episode) -> Episode:
    """`episode` with its image observations as PNG (when Pillow is installed)."""
    return _map_observations(episode, _to_png)


def unpack_images(episode: Episode) -> Episode:
    """`episode` with PNG observations turned back into arrays."""
    return _map_observations(episode, _from_png)


def _map_observations(episode: Episode, convert) -> Episode:
    for trajectory in episode.trajectories:
        for step in trajectory.steps:
            step.observation = _walk(step.observation, convert)
    return episode


def _walk(value: Any, convert) -> Any:
    if isinstance(value, dict):
        return {key: _walk(item, convert) for key, item in value.items()}
    return convert(value)


def _to_png(value: Any) -> Any:
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", ())
    is_image = dtype is not None and str(dtype) == "uint8" and len(shape) == 3 and shape[2] == 3
    if not is_image:
        return value
    try:
        from PIL import Image
    except ImportError:
        return value  # the raw array still travels, only larger
    buffer = io.BytesIO()
    Image.fromarray(value).save(buffer, format="PNG", compress_level=1)
    return PngImage(buffer.getvalue())


def _from_png(value: Any) -> Any:
    if not isinstance(value, PngImage):
        return value
    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(value.png)).convert("RGB"))
