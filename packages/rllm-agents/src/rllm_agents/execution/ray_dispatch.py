"""`RayEpisodes`: one run's episodes sent to Ray workers, least-loaded first, none lost.

Made by :meth:`RayExecutor.open <rllm_agents.execution.ray_executor.RayExecutor.open>`; lives on
the run's event loop. ``run(index, task, seed)`` waits for the least-loaded worker with a free
slot (waiters are served first come, first served), plays the episode there and returns it.
A lost worker is killed and replaced in the background while its episodes try again elsewhere
(the rules are in :mod:`rllm_agents.execution.ray_executor`).
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Any

from rllm_agents.execution.ray_worker import receive_episode
from rllm_agents.types import Episode, TerminationReason

if TYPE_CHECKING:  # the executor imports this module when a run opens
    from rllm_agents.execution.ray_executor import RayExecutor, WorkerRecord

WORKER_LOST = "worker_lost"


class NoWorkersLeft(RuntimeError):
    """Every worker of the run is lost and none could replace them."""


class RayEpisodes:
    def __init__(
        self,
        executor: RayExecutor,
        runner: Any,
        setup_key: str,
        setup: bytes,
        capacity: int,
        gateway: Any = None,
    ) -> None:
        self._executor = executor
        self._setup_key = setup_key
        self._setup = setup
        self._capacity = capacity
        self._gateway = gateway
        limit = _time_limit(runner)
        self._answer_timeout = None if limit is None else limit + executor.answer_grace_s
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._replacing: set[asyncio.Task] = set()
        self.metrics: dict[str, Any] = {
            "ray_workers": len(executor.pool),
            "ray_workers_lost": 0,
            "ray_episode_retries": 0,
            "ray_episodes_lost": 0,
        }

    async def begin(self) -> None:
        """Open the run on every worker (sending the setup where it is new)."""
        results = await asyncio.gather(
            *(self._begin_on(worker) for worker in list(self._executor.pool)),
            return_exceptions=True,
        )
        for worker, result in zip(list(self._executor.pool), results, strict=True):
            if isinstance(result, BaseException):
                if not _is_lost(result):
                    raise result  # the setup does not unpickle or build there: say so now
                self._lose(worker)
        if not self._executor.pool and not self._replacing:
            raise NoWorkersLeft("every Ray worker was lost while the run started")

    async def _begin_on(self, worker: WorkerRecord) -> None:
        fresh = worker.setup_key != self._setup_key
        await worker.handle.begin.remote(
            self._setup_key, self._setup if fresh else None, self._capacity
        )
        worker.setup_key = self._setup_key

    # ---- one episode ------------------------------------------------------------------------
    async def run(self, index: int, task: dict[str, Any] | None, seed: int | str | None) -> Episode:
        """Episode `index` (`seed`: its env seed, or a workflow's uid) from a worker."""
        reasons: list[str] = []
        while len(reasons) < self._executor.max_attempts:
            try:
                worker = await self._acquire()
            except NoWorkersLeft as error:
                reasons.append(str(error))
                break
            try:
                episode = receive_episode(
                    await asyncio.wait_for(
                        _answer(worker.handle.run_episode.remote(index, task, seed)),
                        self._answer_timeout,
                    )
                )
            except asyncio.TimeoutError:
                reasons.append(f"no answer within {self._answer_timeout:.0f}s")
                self._lose(worker)
                continue
            except Exception as error:  # noqa: BLE001 - sorted below: lost worker or not
                if not _is_lost(error):
                    attempts = len(reasons) + 1
                    return _failed_episode(index, task, seed, _brief(error), None, attempts)
                reasons.append(_brief(error))
                self._lose(worker)
                continue
            finally:
                self._release(worker)
            if reasons:
                episode.info["ray_attempt_errors"] = reasons
                self.metrics["ray_episode_retries"] += len(reasons)
            return episode
        self.metrics["ray_episodes_lost"] += 1
        message = f"lost its Ray worker {len(reasons)} time(s): " + " | ".join(reasons)
        return _failed_episode(index, task, seed, message, WORKER_LOST, len(reasons))

    # ---- least-loaded workers with free slots -----------------------------------------------
    async def _acquire(self) -> WorkerRecord:
        while True:
            free = [w for w in self._executor.pool if w.in_flight < self._capacity]
            if free and not self._waiters:
                worker = min(free, key=lambda w: w.in_flight)
                worker.in_flight += 1
                return worker
            if not self._executor.pool and not self._replacing:
                raise NoWorkersLeft("no Ray worker left: all were lost and none could be replaced")
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            free = [w for w in self._executor.pool if w.in_flight < self._capacity]
            if free:
                worker = min(free, key=lambda w: w.in_flight)
                worker.in_flight += 1
                self._wake()  # more slots may be free than this waiter needed
                return worker

    def _release(self, worker: WorkerRecord) -> None:
        worker.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        """Wake the first waiter if a slot is free; every waiter if nothing can come anymore."""
        if not self._executor.pool and not self._replacing:
            while self._waiters:
                _resolve(self._waiters.popleft())
            return
        if self._waiters and any(w.in_flight < self._capacity for w in self._executor.pool):
            _resolve(self._waiters.popleft())

    # ---- losing and replacing workers -------------------------------------------------------
    def _lose(self, worker: WorkerRecord) -> None:
        if worker not in self._executor.pool:
            return  # another of its episodes reported it first
        self._executor.forget(worker)
        self.metrics["ray_workers_lost"] += 1
        task = asyncio.get_running_loop().create_task(self._replace())
        self._replacing.add(task)
        task.add_done_callback(self._replaced)

    async def _replace(self) -> None:
        try:
            worker = await self._executor.start_worker()
            await self._begin_on(worker)
        except Exception:  # noqa: BLE001 - the run goes on with the workers it has
            return
        self._executor.pool.append(worker)

    def _replaced(self, task: asyncio.Task) -> None:
        self._replacing.discard(task)
        # A new worker has free slots for several waiters; with none left, they must hear it.
        for _ in range(self._capacity if self._executor.pool else len(self._waiters)):
            self._wake()

    async def aclose(self) -> None:
        """End the run: stop replacing workers and close every worker's envs."""
        for task in list(self._replacing):
            task.cancel()
        await asyncio.gather(*self._replacing, return_exceptions=True)
        ends = [worker.handle.end.remote() for worker in self._executor.pool]
        results = await asyncio.gather(*ends, return_exceptions=True)
        for worker, result in zip(list(self._executor.pool), results, strict=True):
            if isinstance(result, BaseException):
                self._executor.forget(worker)
        if self._gateway is not None:
            await self._gateway.stop()


def _time_limit(runner: Any) -> float | None:
    """How long one task may take on a worker: an episode's timeout, a workflow's attempts."""
    limits = getattr(runner, "limits", None)  # an AgentExecutionEngine's EpisodeLimits
    if limits is not None:
        return limits.trajectory_timeout
    if runner.timeout is None:
        return None
    return runner.timeout * (runner.retry_limit + 1)


async def _answer(ref: Any) -> Any:
    return await ref


def _resolve(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _is_lost(error: BaseException) -> bool:
    """Whether `error` means the worker (or its node) is gone, rather than the episode failed."""
    from ray import exceptions

    if isinstance(error, exceptions.RayActorError):
        return not error.actor_init_failed
    return isinstance(
        error, (exceptions.WorkerCrashedError, exceptions.NodeDiedError, exceptions.ObjectLostError)
    )


def _brief(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def _failed_episode(
    index: int,
    task: dict[str, Any] | None,
    seed: int | str | None,
    error: str,
    failure: str | None,
    attempts: int,
) -> Episode:
    """The Episode of a task no worker could finish (named as the engines name episodes)."""
    if isinstance(seed, str):  # a workflow's uid, "task_key:index"
        task_key = seed.rsplit(":", 1)[0]
    elif task is not None and task.get("task_id") is not None:
        task_key = str(task["task_id"])
    elif task is None and seed is not None:
        task_key = f"seed-{seed}"
    else:
        task_key = str(index)
    return Episode(
        id=seed if isinstance(seed, str) else f"{task_key}:{index}",
        task=task if task is not None else {"seed": seed},
        termination_reason=TerminationReason.ERROR,
        failure=failure,
        error=error,
        metrics={"turns": 0.0, "llm_time": 0.0, "env_time": 0.0, "attempts": float(attempts)},
        info={"task_key": task_key, "seed": seed},
    )
