"""Where episodes run: this process (the inline executor) or the workers of a Ray cluster.

An executor opens a run with ``await open(runner, count)``, which returns what runs its
episodes (``run``, ``aclose``, ``metrics``), and ``close()`` releases what it keeps between
runs. Either engine, the agents' or the workflows', is a runner: it makes what runs its
episodes in one process with ``runner.local_episodes(count)``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rllm_envs.core.loading import load_attr

from rllm_agents.execution.dispatch import DISPATCH_MODES, Dispatch
from rllm_agents.execution.env_slot import EnvSlot, FactoryProbe, LoopPacer
from rllm_agents.types import Episode


class LocalEpisodes:
    """Episodes of an AgentExecutionEngine on `count` env slots of this process, each slot
    reusing its env.

    The inline executor's run, and a Ray worker's for as long as it serves a run. Every
    episode index below `count` is announced to the dispatch up front: a lockstep run gets a
    slot per episode and waits for all of them each round.
    """

    def __init__(self, runner: Any, count: int) -> None:
        self._runner = runner
        self._probe = FactoryProbe(mode=runner._factory_mode)
        pacer = LoopPacer()
        calls = runner.scheduling.env_calls
        self._slots = [
            EnvSlot(runner.env_factory, f"rllm-env-{i}", calls, self._probe, pacer)
            for i in range(count)
        ]
        self._free: asyncio.Queue[EnvSlot] = asyncio.Queue()
        for slot in self._slots:
            self._free.put_nowait(slot)
        self._dispatch: Dispatch = DISPATCH_MODES[runner.scheduling.dispatch](runner.engine)
        self._dispatch.start(range(count))
        self.metrics: dict[str, Any] = {}

    async def run(self, index: int, task: dict[str, Any] | None, seed: int | None) -> Episode:
        slot = await self._free.get()
        try:
            return await self._runner._episode(slot, self._dispatch, index, task, seed)
        finally:
            self._dispatch.finish(index)
            self._free.put_nowait(slot)

    async def aclose(self) -> None:
        await asyncio.gather(*(slot.aclose() for slot in self._slots))
        # How the factory's first env is called, kept by the engine for its later runs.
        self._runner._factory_mode = self._probe.mode


class InlineExecutor:
    """Episodes in this process, `count` at once (the default executor, of either engine)."""

    async def open(self, runner: Any, count: int) -> Any:
        return runner.local_episodes(count)

    def close(self) -> None:
        """Nothing outlives a run here."""


# Executors by name; an executor object (e.g. a configured RayExecutor) may be passed instead.
EXECUTORS: dict[str, str] = {
    "inline": "rllm_agents.execution.executors:InlineExecutor",
    "ray": "rllm_agents.execution.ray_executor:RayExecutor",
}


def resolve_executor(executor: str | Any) -> Any:
    """The executor object for a name in EXECUTORS (made with its defaults), or `executor`."""
    if not isinstance(executor, str):
        return executor
    if executor not in EXECUTORS:
        raise ValueError(
            f"executor must be one of {tuple(EXECUTORS)} or an executor object, not {executor!r}"
        )
    return load_attr(EXECUTORS[executor], what="executor")()
