"""`AgentWorkflowEngine`: run a multi-step :class:`Workflow` per task, with retries and metrics.

Where :class:`~rllm_agents.execution.AgentExecutionEngine` drives one agent against one env
turn by turn, a workflow is any procedure that turns a task into an :class:`Episode`: several
agents (e.g. a solver and a verifier), several model calls, its own reward. The engine runs
``n_parallel`` workflows at once, retries a workflow that raises or ends in ``ERROR`` up to
``retry_limit`` times, enforces a per-attempt timeout, and returns one Episode per task, in
order, with ``attempts`` and ``duration`` in its metrics.

Multi-agent games over PettingZoo envs are workflows too
(:mod:`rllm_agents.execution.multiagent`): their episodes hold one trajectory per seat, and
``last_metrics`` then adds per-seat, per-role and per-policy results and failures by kind
(:func:`~rllm_agents.execution.seat_metrics.summarize_seats`). A workflow factory that holds
resources across workflows (an env pool) is closed after each run through its ``aclose()``.

``executor="ray"`` runs each task's workflow - all its attempts - on a Ray worker instead
(:mod:`rllm_agents.execution.ray_executor`); the workflow factory travels to the workers, so
the engine inside it must be one that pickles (``OpenAIEngine``), and a worker lost mid-task
has the task run again elsewhere.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution.executors import resolve_executor
from rllm_agents.execution.seat_metrics import summarize_seats
from rllm_agents.execution.settings import RunOutput
from rllm_agents.execution.streaming import stream_episodes
from rllm_agents.metrics import summarize_episodes
from rllm_agents.types import Episode, Step, TerminationReason, Trajectory


class Workflow(ABC):
    """One task's procedure; subclasses implement :meth:`run`."""

    def __init__(self, engine: Any, sampling: SamplingParams | None = None) -> None:
        self.engine = engine
        self.sampling = sampling or SamplingParams()

    @abstractmethod
    async def run(self, task: dict[str, Any], uid: str) -> Episode:
        """Solve `task`; raise or return an ERROR episode to ask for a retry."""


class SingleTurnWorkflow(Workflow):
    """Ask the model once and score the reply with ``reward_fn(task, reply) -> float``.

    ``prompt_fn(task) -> list of messages`` builds the conversation.
    """

    def __init__(
        self,
        engine: Any,
        prompt_fn: Callable[[dict[str, Any]], list[dict[str, Any]]],
        reward_fn: Callable[[dict[str, Any], str], float],
        sampling: SamplingParams | None = None,
    ) -> None:
        super().__init__(engine, sampling)
        self.prompt_fn = prompt_fn
        self.reward_fn = reward_fn

    async def run(self, task: dict[str, Any], uid: str) -> Episode:
        messages = self.prompt_fn(task)
        started = time.perf_counter()
        output = await self.engine.generate(messages, sampling=self.sampling)
        llm_time = time.perf_counter() - started
        reward = float(self.reward_fn(task, output.text))
        step = Step(
            observation=messages[-1]["content"],
            model_response=output.text,
            action=output.text,
            reward=reward,
            done=True,
            chat_completions=messages + [{"role": "assistant", "content": output.text}],
            prompt_ids=list(output.prompt_ids),
            response_ids=list(output.completion_ids),
            logprobs=list(output.logprobs),
            finish_reason=output.finish_reason,
            llm_time=llm_time,
        )
        trajectory = Trajectory(name="solver", task=task, steps=[step], reward=reward)
        return Episode(
            id=uid,
            task=task,
            termination_reason=TerminationReason.ENV_DONE,
            trajectories=[trajectory],
            is_correct=reward > 0,
            metrics={"llm_time": llm_time, "completion_tokens": float(output.completion_length)},
        )


class AgentWorkflowEngine:
    """Runs workflows over tasks (see the module docstring)."""

    def __init__(
        self,
        workflow_factory: Callable[[], Workflow],
        *,
        n_parallel: int = 8,
        retry_limit: int = 3,
        timeout: float | None = None,
        output_path: str | Path | None = None,
        output_append: bool = False,
        progress: bool | None = None,
        executor: str | Any = "inline",
    ) -> None:
        if n_parallel < 1 or retry_limit < 0:
            raise ValueError("n_parallel must be at least 1 and retry_limit at least 0")
        self.workflow_factory = workflow_factory
        self.n_parallel = n_parallel
        self.retry_limit = retry_limit
        self.timeout = timeout
        self.output = RunOutput(output_path, output_append, progress)
        self.executor = resolve_executor(executor)
        self.last_metrics: dict[str, Any] = {}

    async def execute_tasks(
        self, tasks: list[dict[str, Any]], task_ids: list[str] | None = None
    ) -> list[Episode]:
        """One Episode per task, in order; ``task_ids`` group repeated samples for pass@k."""
        ids = task_ids or [
            str(task.get("task_id", task.get("id", i))) for i, task in enumerate(tasks)
        ]
        source = await self.executor.open(self, min(self.n_parallel, len(tasks)))

        async def play(index: int) -> Episode:
            episode = await source.run(index, tasks[index], f"{ids[index]}:{index}")
            episode.info.setdefault("task_key", ids[index])
            return episode

        try:
            episodes, wall = await stream_episodes(len(tasks), play, self.output, "workflows")
        finally:
            await source.aclose()
        self.last_metrics = summarize_episodes(episodes)
        self.last_metrics["wall_time"] = wall
        self.last_metrics["retries"] = sum(e.metrics["attempts"] - 1 for e in episodes)
        if any("seating" in episode.info for episode in episodes):
            self.last_metrics.update(summarize_seats(episodes))
        self.last_metrics.update(source.metrics)
        return episodes

    def run(self, tasks: list[dict[str, Any]]) -> list[Episode]:
        return asyncio.run(self.execute_tasks(tasks))

    def local_episodes(self, count: int) -> LocalWorkflows:
        """Workflows in this process, `count` at once (what executors run them with)."""
        return LocalWorkflows(self, count)

    def close(self) -> None:
        """Release what the executor holds between runs (a Ray executor's workers)."""
        self.executor.close()

    async def _with_retries(self, task: dict[str, Any], uid: str) -> Episode:
        errors: list[str] = []
        started = time.perf_counter()
        attempts = 0
        episode: Episode | None = None
        while attempts <= self.retry_limit:
            attempts += 1
            try:
                episode = await asyncio.wait_for(
                    self.workflow_factory().run(task, uid), self.timeout
                )
            except asyncio.TimeoutError:
                episode = Episode(id=uid, task=task, termination_reason=TerminationReason.TIMEOUT)
                episode.error = f"attempt exceeded timeout={self.timeout}s"
            except Exception as exc:  # noqa: BLE001 - a failed attempt is retried, then recorded
                episode = Episode(id=uid, task=task, termination_reason=TerminationReason.ERROR)
                episode.error = f"{type(exc).__name__}: {exc}"
            if episode.termination_reason not in _RETRIED:
                break
            errors.append(episode.error or "workflow ended in error")
        episode.metrics["attempts"] = float(attempts)
        episode.metrics["duration"] = time.perf_counter() - started
        if errors:
            episode.info["attempt_errors"] = errors
        return episode


class LocalWorkflows:
    """Tasks' workflows, with their retries, `count` at once in this process.

    The inline executor's run, and a Ray worker's; closing it closes the workflow factory's
    shared resources (an env pool) when it has any.
    """

    def __init__(self, runner: AgentWorkflowEngine, count: int) -> None:
        self._runner = runner
        self._gate = asyncio.Semaphore(max(count, 1))
        self.metrics: dict[str, Any] = {}

    async def run(self, index: int, task: dict[str, Any], uid: str) -> Episode:
        async with self._gate:
            return await self._runner._with_retries(task, uid)

    async def aclose(self) -> None:
        close = getattr(self._runner.workflow_factory, "aclose", None)
        if close is not None:
            await close()


_RETRIED = (TerminationReason.ERROR, TerminationReason.TIMEOUT)
