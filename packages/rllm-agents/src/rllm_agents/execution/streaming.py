"""Episodes played at once and streamed out as each ends: to the run's episode log (one JSON line
each, flushed, so a killed run keeps every episode that finished) and onto the progress bar.
Both engines, the agents' and the workflows', run their episodes through it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from rllm_agents.execution.progress import RewardProgress
from rllm_agents.execution.settings import RunOutput
from rllm_agents.run_folder import fault_point
from rllm_agents.types import Episode


async def stream_episodes(
    count: int, play: Callable[[int], Awaitable[Episode]], output: RunOutput, label: str
) -> tuple[list[Episode], float]:
    """Episodes ``play(0) .. play(count - 1)``, all at once, in order; and the wall seconds."""
    path = output.output_path
    sink = path.open("a" if output.output_append else "w", encoding="utf-8") if path else None
    started = time.perf_counter()
    written = 0  # episodes in the log so far
    try:
        with RewardProgress(count, label, output.progress) as progress:

            async def one(index: int) -> Episode:
                nonlocal written
                episode = await play(index)
                if sink is not None:
                    sink.write(episode.to_json() + "\n")
                    sink.flush()
                    written += 1
                    fault_point("episode_written", written)  # tests kill -9 here
                progress.advance(episode.reward)
                return episode

            episodes = list(await asyncio.gather(*(one(index) for index in range(count))))
    finally:
        if sink is not None:
            sink.close()
    return episodes, time.perf_counter() - started
