"""`RayExecutor`: the execution engine's episodes on long-lived Ray actors, across machines.

``AgentExecutionEngine(..., executor="ray")`` (or ``executor=RayExecutor(address=...)``) keeps
its API and its results - one Episode per task, in order, the same episode for the same seed -
while the episodes run on :class:`~rllm_agents.execution.ray_worker.EpisodeWorker` actors,
each holding many envs. What travels is a whole episode: the worker builds the env from the
env factory (best an :class:`~rllm_agents.execution.env_spec.EnvSpec`: id + kwargs), resets
it with the task's seed, runs the agent loop against the model server's URL, and sends back
the finished Episode. A remote call per env step would cost about 1 ms; a whole episode costs
about one such call in all (``benchmarks/ray_scaleout.py``).

Placement
    Each episode goes to the least-loaded worker with a free slot (not static chunks): a
    worker holds ``ceil(n_parallel / workers)`` envs at once. Env kinds are routed with Ray
    custom resources: every worker asks for the resources its env kind needs
    (:data:`ENV_RESOURCES`, e.g. ``{"docker": 1}`` for ``rllm/Code-v0`` on the docker backend,
    ``{"browser": 1}`` for ``rllm/Web-v0``), which nodes offer with ``ray start --resources``.
    If no node of the cluster offers them the run fails at once, naming what is missing.

Model
    A rollout engine that is an HTTP client (``OpenAIEngine``: vLLM, SGLang, llama.cpp) is
    copied to the workers, which call the server themselves. Any other engine - the in-process
    ``LocalEngine`` a trainer samples from - is served to the workers for the run by a
    :class:`~rllm_agents.execution.model_gateway.ModelGateway` on the driver.

Faults
    A worker that dies (its process or its node), that Ray reports unreachable, or that does
    not answer within ``trajectory_timeout + answer_grace_s`` is killed and replaced, and its
    episodes run again from the same task and seed on other workers, up to ``max_attempts``
    tries; after that the episode ends as ``ERROR`` with ``failure="worker_lost"`` and the
    reasons. Every task gets exactly one Episode: a retried episode's earlier attempt is
    abandoned, never counted. An exception raised by the env or the agent is not a lost
    worker: the worker records it in the episode (``ERROR``), as in-process runs do. The
    envs of a killed worker go with its process: bubblewrap sandboxes die with their parent,
    and labelled Docker containers of a dead owner are removed by the next sandbox made on
    that host. How fast a dead *node* is noticed is Ray's health check; clusters this executor
    starts use :data:`FAST_NODE_DEATH` (about 1.5 s instead of Ray's default of ~15 s), and
    ``ray start --system-config`` sets it for clusters started by hand (docs/agents/ray.md).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
import math
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rllm_agents import reaper
from rllm_agents.execution.env_spec import EnvSpec
from rllm_agents.run_folder import terminate_on_signals

log = logging.getLogger(__name__)

# Ray's GCS health check of nodes: a probe every 0.5 s, dead after 3 missed ones. Read-only:
# ray.init adds its own keys to the system config it is given (object spilling, with the
# session's folder), so each start gets a copy (dict(FAST_NODE_DEATH)).
FAST_NODE_DEATH = MappingProxyType(
    {
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": 500,
        "health_check_timeout_ms": 500,
        "health_check_failure_threshold": 3,
    }
)


def _docker_backend(kwargs: dict[str, Any]) -> dict[str, float]:
    return {"docker": 1.0} if kwargs.get("backend") == "docker" else {}


# What a worker hosting an env kind needs from its node, by env id (from the env's kwargs).
ENV_RESOURCES: dict[str, Callable[[dict[str, Any]], dict[str, float]]] = {
    "rllm/Code-v0": _docker_backend,
    "rllm/SWE-v0": lambda kwargs: {"docker": 1.0},
    "rllm/Web-v0": lambda kwargs: {"browser": 1.0},
}


def resources_for_env(env_id: str, kwargs: dict[str, Any] | None = None) -> dict[str, float]:
    """The custom Ray resources a worker for `env_id` asks for ({} for plain envs)."""
    route = ENV_RESOURCES.get(env_id.split(":", 1)[-1])
    return route(dict(kwargs or {})) if route else {}


class UnroutableEnvError(RuntimeError):
    """No node of the Ray cluster offers what the env kind's workers need."""


class WorkerStartError(RuntimeError):
    """The Ray workers could not be started (their set-up raised, or no node took them)."""


class _WorkerDied(Exception):
    """A starting worker died before it answered (its cause: Ray's error)."""


WORKER_START_ATTEMPTS = 2


@dataclass
class WorkerRecord:
    """A started worker actor, as the driver sees it."""

    handle: Any
    node_id: str
    setup_key: str | None = None  # the setup it holds
    in_flight: int = 0


@dataclass
class RayExecutor:
    """Runs an execution engine's episodes on Ray actors (see the module docstring).

    Args:
        address: the cluster (``ray.init(address=...)``; ``"auto"``: the one this machine
            belongs to). None: ``$RAY_ADDRESS`` if set, else a local cluster for this process.
        workers: how many worker actors; None: one per node that can host the env kind.
        cpus_per_worker: CPUs each worker reserves on its node.
        resources: custom resources each worker asks for; None: by env kind
            (:func:`resources_for_env`, when the env factory is an :class:`EnvSpec`).
        max_attempts: tries per episode when workers are lost.
        answer_grace_s: how long past the engine's ``trajectory_timeout`` the driver waits for
            an episode before it treats the worker as hung (no limit without a timeout).
        start_timeout_s: how long a worker may take to start.
        init_kwargs: more ``ray.init`` arguments.
    """

    address: str | None = None
    workers: int | None = None
    cpus_per_worker: float = 1.0
    resources: dict[str, float] | None = None
    max_attempts: int = 3
    answer_grace_s: float = 30.0
    start_timeout_s: float = 120.0
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    _pool: list[WorkerRecord] = field(default_factory=list, init=False, repr=False)
    _pool_needs: dict[str, float] | None = field(default=None, init=False, repr=False)
    _gateway: Any = field(default=None, init=False, repr=False)
    _watchdog: Any = field(default=None, init=False, repr=False)  # reaper.Watchdog

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be at least 1")

    # ---- a run ------------------------------------------------------------------------------
    async def open(self, runner: Any, count: int):
        """Workers ready for a run of `runner`'s episodes, `count` at once at most."""
        from rllm_agents.execution.ray_dispatch import RayEpisodes

        scheduling = getattr(runner, "scheduling", None)  # workflows have no dispatch
        dispatch = scheduling.dispatch if scheduling is not None else "async"
        if dispatch != "async":
            raise ValueError(
                f"dispatch={dispatch!r} plays every episode's turns in one process; "
                "the Ray executor runs episodes on workers: use dispatch='async'"
            )
        env_factory = getattr(runner, "env_factory", None)  # workflows make their own envs
        needs = self.worker_needs(env_factory)
        self._connect()
        fitting = nodes_offering(needs)
        if not fitting:
            raise UnroutableEnvError(_unroutable_message(needs, _env_name(env_factory)))
        if count == 0:
            return RayEpisodes(self, runner, "", b"", 1)
        engine, gateway = None, None
        if hasattr(runner, "engine"):  # a workflow's engine travels inside its factory
            engine, gateway = await self._engine_for_workers(runner.engine)
        key, setup = worker_setup(runner, engine)
        await self._ensure_workers(needs, self.workers or len(fitting))
        capacity = math.ceil(count / len(self._pool))
        episodes = RayEpisodes(self, runner, key, setup, capacity, gateway)
        await episodes.begin()
        return episodes

    def worker_needs(self, env_factory: Any) -> dict[str, float]:
        """The Ray resources each worker for this env factory asks for, CPUs included."""
        if self.resources is not None:
            custom = dict(self.resources)
        elif isinstance(env_factory, EnvSpec):
            custom = resources_for_env(env_factory.id, env_factory.kwargs)
        else:
            custom = {}
        return {"CPU": float(self.cpus_per_worker), **custom}

    def close(self) -> None:
        """Close every worker's envs, then end the workers."""
        import ray

        workers, self._pool = self._pool, []
        if not workers or not ray.is_initialized():
            return
        ends = [worker.handle.end.remote() for worker in workers]
        try:
            ray.wait(ends, num_returns=len(ends), timeout=30)
        finally:
            for worker in workers:
                kill_quietly(worker.handle)

    # ---- workers ----------------------------------------------------------------------------
    def _connect(self) -> None:
        import ray

        if ray.is_initialized():
            return
        if _starts_local(self.address):
            # "local": a cluster of the run's own. With no address Ray joins any cluster
            # already running on the machine (another run's, a `ray start`), which refuses
            # this run's system config.
            ray.init(
                **{"address": "local", "_system_config": dict(FAST_NODE_DEATH), **self.init_kwargs}
            )
            # The cluster's processes are this driver's to end: a watchdog kills what is left
            # of them once the driver is gone, kill -9 included (Ray's own agents outlive it).
            self._watchdog = reaper.watch(os.getpid())
        else:
            ray.init(address=self.address, **self.init_kwargs)
        # ray.init replaces the SIGTERM handler with one that exits with status 15; ours
        # unwinds the same way (atexit still shuts Ray down) with the CLIs' documented 143.
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
            terminate_on_signals((signal.SIGTERM,))

    async def _ensure_workers(self, needs: dict[str, float], wanted: int) -> None:
        if needs != self._pool_needs:
            self.close()
            self._pool_needs = needs
        if len(self._pool) < wanted:
            started = await asyncio.gather(
                *(self.start_worker() for _ in range(wanted - len(self._pool))),
                return_exceptions=True,
            )
            self._pool.extend(w for w in started if isinstance(w, WorkerRecord))
            failures = [w for w in started if isinstance(w, BaseException)]
            if not self._pool:
                raise failures[0]

    async def start_worker(self) -> WorkerRecord:
        """One more worker for the current env kind, started (or WorkerStartError).

        A worker that dies before it answers is started once more: on a loaded machine Ray
        has been seen to lose a starting worker process ("the actor died unexpectedly before
        finishing this task") that a second start brings up. A worker whose own set-up fails
        fails both times, and its error is raised; one that finds no room is not retried."""
        for attempt in range(1, WORKER_START_ATTEMPTS + 1):
            try:
                return await self._start_one_worker()
            except _WorkerDied as died:
                if attempt == WORKER_START_ATTEMPTS:
                    raise WorkerStartError(
                        f"a Ray worker failed to start ({attempt} tries): {died.__cause__}"
                    ) from died.__cause__
                log.warning(
                    "a Ray worker died while starting; starting another: %s", died.__cause__
                )
        raise AssertionError("unreachable")

    async def _start_one_worker(self) -> WorkerRecord:
        import ray

        from rllm_agents.execution.ray_worker import EpisodeWorker

        needs = dict(self._pool_needs or {"CPU": float(self.cpus_per_worker)})
        cpus = needs.pop("CPU")
        handle = (
            ray.remote(EpisodeWorker)
            .options(
                num_cpus=cpus,
                resources=needs or None,
                scheduling_strategy="SPREAD",
                max_restarts=0,
                max_concurrency=100_000,
            )
            .remote()
        )
        try:
            where = await asyncio.wait_for(handle.where.remote(), self.start_timeout_s)
        except asyncio.TimeoutError:
            kill_quietly(handle)
            raise WorkerStartError(
                f"a Ray worker needing {self._pool_needs} did not start within "
                f"{self.start_timeout_s:.0f}s (is the cluster full?)"
            ) from None
        except asyncio.CancelledError:
            kill_quietly(handle)  # else it would wait for room in the cluster, forever
            raise
        except Exception as error:  # noqa: BLE001 - the worker's own set-up failed: say why
            kill_quietly(handle)
            raise _WorkerDied() from error
        return WorkerRecord(handle=handle, node_id=where["node_id"])

    def forget(self, worker: WorkerRecord) -> None:
        """Drop a lost worker for good (killed, so no late answer or env survives it)."""
        if worker in self._pool:
            self._pool.remove(worker)
        kill_quietly(worker.handle)

    @property
    def pool(self) -> list[WorkerRecord]:
        return self._pool

    async def _engine_for_workers(self, engine: Any) -> tuple[Any, Any]:
        """(the engine the workers use, the gateway serving it from here or None)."""
        from rllm_agents.engines.openai import OpenAIEngine

        if isinstance(engine, OpenAIEngine):
            return engine, None
        from rllm_agents.execution.model_gateway import ModelGateway

        if self._gateway is None:
            self._gateway = ModelGateway()
        await self._gateway.start(engine)
        return self._gateway.client(), self._gateway


def worker_setup(runner: Any, engine: Any) -> tuple[str, bytes]:
    """(digest, pickled copy of `runner` for the workers: in-process, with `engine` if any)."""
    from ray import cloudpickle

    from rllm_agents.execution.executors import resolve_executor
    from rllm_agents.execution.settings import RunOutput

    setup = copy.copy(runner)
    if engine is not None:
        setup.engine = engine
    setup.executor = resolve_executor("inline")
    setup.output = RunOutput(progress=False)  # the head writes and shows the episodes
    setup.last_metrics = {}
    try:
        data = cloudpickle.dumps(setup)
    except Exception as error:  # noqa: BLE001 - say what could not travel
        raise ValueError(
            "executor='ray' sends the agent factory, the env factory, the rollout engine and "
            f"the tokenizer to the workers, and one of them cannot be pickled: {error}"
        ) from error
    return hashlib.sha256(data).hexdigest()[:16], data


def nodes_offering(needs: dict[str, float]) -> list[dict[str, Any]]:
    """The alive nodes whose resources could host one worker with `needs`."""
    import ray

    return [
        node
        for node in ray.nodes()
        if node.get("Alive")
        and all(
            node.get("Resources", {}).get(name, 0.0) >= amount for name, amount in needs.items()
        )
    ]


def kill_quietly(handle: Any) -> None:
    import ray

    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - already dead, or the cluster is going away
        pass


def _starts_local(address: str | None) -> bool:
    return address is None and not os.environ.get("RAY_ADDRESS")


def _env_name(env_factory: Any) -> str:
    if isinstance(env_factory, EnvSpec):
        return f"{env_factory.id} {env_factory.kwargs}" if env_factory.kwargs else env_factory.id
    return "this env"


def _unroutable_message(needs: dict[str, float], env_name: str) -> str:
    import ray

    offered = sorted(
        {
            name
            for node in ray.nodes()
            if node.get("Alive")
            for name in node.get("Resources", {})
            if not name.startswith("node:")
        }
    )
    custom = {name: amount for name, amount in needs.items() if name != "CPU"}
    hint = (
        f"start a node that offers them, e.g. ray start --address=HEAD "
        f"--resources='{_json(custom)}'"
        if custom
        else "lower cpus_per_worker or add CPUs"
    )
    return (
        f"no node of the Ray cluster can host a worker for {env_name}: each needs {needs}, "
        f"and the alive nodes offer only {offered}; {hint}"
    )


def _json(value: dict[str, float]) -> str:
    import json

    return json.dumps({name: int(amount) if amount.is_integer() else amount
                       for name, amount in value.items()})  # fmt: skip
