"""Where the native trainer's episodes come from: one seam, one implementation.

The trainer asks an :class:`EpisodeSampler` for one Episode per task seed, in order, at a
temperature and with a sampling seed, and gets back a :class:`Rollout`. Everything about how
the episodes are played - agents, envs, chat templates, token-in/token-out bookkeeping, the
model engine - sits behind that call. A sampler that runs multi-agent workflows returns Episodes
with several trajectories (one per seat), which :mod:`rllm_train.native.batch` already trains.

:class:`ExecutionSampler` is the one the trainer uses: rllm-agents' ``AgentExecutionEngine``
(the machinery every rllm evaluation runs on) over a ``LocalEngine`` that serves the very model
object being trained, so each step samples from the latest weights with no copy. Its turns are
dispatched in lockstep rounds by default (``rollout.dispatch``), which with the per-request
sampling seeds makes a run reproducible bit for bit; see :mod:`rllm_agents.execution.dispatch`.
With ``rollout.executor=ray`` the episodes run on the workers of a Ray cluster instead, which
reach this process's engine through a gateway (:mod:`rllm_agents.execution.ray_executor`); the
workers are started once and serve every step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym
from rllm_agents.agents.base import BaseAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.local import LocalEngine
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.execution.compaction import CompactionSettings, policy_kind
from rllm_agents.execution.engine import resolve_executor
from rllm_agents.types import Episode

from rllm_train.config import EnvConfig, RolloutConfig


@dataclass
class Rollout:
    """The episodes of one call, in seed order, and where the time went."""

    episodes: list[Episode]
    generate_seconds: float = 0.0  # the model engine busy sampling
    env_seconds: float = 0.0  # env calls, summed over episodes
    # The group of each episode, when the sampler chose them (tree rollouts: the branches of
    # one snapshot); None: the episodes of one task seed are one group.
    groups: list[str] | None = None
    judge_seconds: float = 0.0  # a judge model scoring them (reward.judge; native/judging.py)


class EpisodeSampler(Protocol):
    def sample(
        self,
        seeds: Sequence[int],
        temperature: float,
        sampling_seed: int | None,
        tasks: Sequence[dict[str, Any]] | None = None,
    ) -> Rollout:
        """One Episode per seed (the env resets with it), in order; with `tasks`, episode i
        plays task row i (``reset(seed, options={"task": row})``)."""

    def close(self) -> None:
        """Free threads and memory the sampler holds."""


@dataclass(frozen=True)
class RolloutLimits:
    max_turns: int = 1
    max_response_tokens: int = 64  # per turn
    max_prompt_tokens: int = 1024  # any turn's whole prompt: the conversation so far
    top_p: float = 1.0
    dispatch: str = "lockstep"  # or "async" (rllm_agents.execution.dispatch)
    # rollout.compaction (rllm_train.config.compaction.CompactionConfig); None: none
    compaction: Any = None

    def sampling(self, temperature: float) -> SamplingParams:
        """The engine settings of one rollout's model turns."""
        return SamplingParams(
            temperature=temperature, top_p=self.top_p, max_tokens=self.max_response_tokens
        )


@dataclass(frozen=True)
class PolicyServing:
    """What serves the trained policy to a sampler: the model, its tokenizer, and the engine
    that samples from it - a LocalEngine on the model itself (:meth:`on_model`), or an engine
    apart from it (a synced copy, llama.cpp, vLLM: :mod:`.engine_apart`). The sampler given it
    owns the engine and closes it."""

    model: Any
    tokenizer: Any
    engine: Any

    @classmethod
    def on_model(
        cls, model: Any, tokenizer: Any, *, max_batch_size: int, autocast_dtype: Any = None
    ) -> PolicyServing:
        """A LocalEngine on `model` itself, on its device: no copy, so every rollout samples
        from the weights as the last update left them."""
        engine = LocalEngine(
            model,
            tokenizer,
            device=str(next(model.parameters()).device),
            max_batch_size=max_batch_size,
            autocast_dtype=autocast_dtype,
        )
        # Its weights are the trainer's, whatever their version: samples carry none, and the
        # trainer takes them to be from the weights it trains (a version of its own, never
        # updated, would claim the starting weights).
        engine.policy_version = None
        return cls(model, tokenizer, engine)


def busy_seconds(engines: Sequence[Any]) -> float | None:
    """The time `engines` have spent sampling so far (None: an engine that does not count it,
    such as llama.cpp's servers)."""
    stats = [getattr(engine, "stats", None) for engine in engines]
    if any(stat is None for stat in stats):
        return None
    return sum(stat.busy_seconds for stat in stats)


def timed_rollout(engines: Sequence[Any], play: Callable[[], list[Episode]]) -> Rollout:
    """The episodes `play` returns, with the time `engines` spent sampling them (the whole
    call's wall time for engines that do not count it) and the time their envs took."""
    started = time.perf_counter()
    busy_before = busy_seconds(engines)
    episodes = play()
    busy_after = busy_seconds(engines)
    generate = (
        busy_after - busy_before
        if busy_after is not None and busy_before is not None
        else time.perf_counter() - started
    )
    return Rollout(
        episodes,
        generate_seconds=generate,
        env_seconds=sum(episode.metrics.get("env_time", 0.0) for episode in episodes),
    )


class ServingSampler:
    """What every native sampler is made of: the policy as `serving` serves it (the sampler
    owns its engine and closes it), the env factory and the rollout limits."""

    def __init__(
        self, serving: PolicyServing, env_factory: Callable[[], Any], limits: RolloutLimits
    ) -> None:
        self.serving = serving
        self.env_factory = env_factory
        self.limits = limits

    @property
    def model(self) -> Any:
        return self.serving.model

    @property
    def tokenizer(self) -> Any:
        return self.serving.tokenizer

    @property
    def engine(self) -> Any:
        return self.serving.engine

    def serve(self) -> None:
        """Before sampling: the trainer leaves the model in train mode after an update."""
        if getattr(self.engine, "model", None) is self.model:
            self.model.eval()

    def close(self) -> None:
        close_engine(self.engine)


class ExecutionSampler(ServingSampler):
    """Episodes through ``AgentExecutionEngine`` over the engine `serving` names: a
    ``LocalEngine`` on the trained model (module doc), or an engine apart from it (a synced
    copy, llama.cpp; :mod:`.engine_apart`)."""

    def __init__(
        self,
        serving: PolicyServing,
        env_factory: Callable[[], gym.Env],
        agent_factory: Callable[[], BaseAgent],
        limits: RolloutLimits,
        *,
        executor: Any = "inline",
    ) -> None:
        super().__init__(serving, env_factory, limits)
        self.agent_factory = agent_factory
        self.executor = resolve_executor(executor)
        self.summary_engine, self.compaction = compaction_of(limits.compaction)

    def sample(
        self,
        seeds: Sequence[int],
        temperature: float,
        sampling_seed: int | None,
        tasks: Sequence[dict[str, Any]] | None = None,
    ) -> Rollout:
        self.serve()
        limits = self.limits
        executor = AgentExecutionEngine(
            self.agent_factory,
            self.env_factory,
            self.engine,
            tokenizer=self.tokenizer,
            n_parallel=len(seeds),
            max_turns=limits.max_turns,
            max_context_tokens=limits.max_prompt_tokens,
            sampling=limits.sampling(temperature),
            token_level=True,
            seed=None,
            progress=False,
            dispatch=limits.dispatch,
            sampling_seed=sampling_seed,
            executor=self.executor,
            compaction=self.compaction,
        )
        return timed_rollout(
            [self.engine],
            lambda: executor.run(
                tasks=list(tasks) if tasks is not None else None, seeds=list(seeds)
            ),
        )

    def close(self) -> None:
        self.executor.close()  # Ray workers: their envs, then the workers
        if self.summary_engine is not None:
            close_engine(self.summary_engine)
        super().close()


def compaction_of(config: Any) -> tuple[Any, CompactionSettings]:
    """(the engine that writes summaries, or None; the compaction settings) of
    ``rollout.compaction`` (None: no compaction)."""
    if config is None or not config.enabled:
        return None, CompactionSettings()
    engine = None
    if policy_kind(config.policy).summary_by == "other":
        engine = LocalEngine.from_name(config.summary_model)
    return engine, config.settings(engine)


def close_engine(engine: Any) -> None:
    """Stop `engine`: its ``close()``, or its coroutine ``aclose()`` (llama.cpp's servers)."""
    close = getattr(engine, "close", None)
    if close is not None:
        close()
    else:
        asyncio.run(engine.aclose())


def rollout_executor(rollout: RolloutConfig, env: EnvConfig) -> Any:
    """Where episodes run, from the config: "inline", or Ray workers routed by the env's kind."""
    if rollout.executor == "inline":
        return "inline"
    from rllm_agents.execution.ray_executor import RayExecutor, resources_for_env

    return RayExecutor(
        address=rollout.ray_address or None,
        workers=rollout.ray_workers or None,
        resources=resources_for_env(env.id, env.kwargs),
    )
