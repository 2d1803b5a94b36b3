"""`AgentExecutionEngine`: many (agent, env) pairs rolled out concurrently on asyncio.

Each task runs as one episode: ``env.reset(seed, options={"task": row})``, then turns of
*agent → model → env* until the env ends it or a limit does. ``n_parallel`` episodes run at
once, each on an :class:`~rllm_agents.execution.env_slot.EnvSlot` (its env's own thread; the
event loop for envs that declare themselves inline-safe; ``areset`` / ``astep`` awaited on the
loop for natively async envs such as Web, MCP and SWE), while model calls from all of them
overlap on the event loop (engines batch them).

Nothing is lost: an engine exception, a stall past ``trajectory_timeout`` or an env crash ends
that episode as :attr:`TerminationReason.ERROR` / ``TIMEOUT`` with the partial trajectory and the
error text, and every task in gives exactly one Episode out, in order. Time an episode's
requests spend waiting for a serving slot of the engine (``ModelOutput.queue_time``: an engine
that serves only so many requests at once, :mod:`rllm_agents.engines.slots`) is recorded
apart, per step and as the episode's ``queue_time`` metric, and is left off its
``trajectory_timeout``: other episodes were ahead of it, it was not slow itself.

Token budgets, with token-level rendering (``token_level=True`` and a tokenizer):
``max_prompt_tokens`` bounds the first prompt; ``max_response_tokens`` bounds everything after
it (model turns and env turns together, as a trainer lays them out), and each turn's
``max_tokens`` is cut to what is left. Without a tokenizer only model-reported completion token
counts are budgeted. ``max_context_tokens`` bounds each turn's whole prompt (the conversation
so far), for a trainer whose sequences must fit in memory.

Scheduling (``dispatch``): ``"async"`` sends each model request as soon as its agent asks;
``"lockstep"`` plays turns in rounds, all running episodes' requests together, which makes the
local engine's batches - and so the rollout - reproducible bit for bit
(:mod:`rllm_agents.execution.dispatch`). With ``sampling_seed`` every request of episode i,
turn t is sampled with its own seed from (sampling_seed, i, t), so what an episode draws does
not depend on what shares its batch.

Recording (``record_env``, on by default): each Episode carries an
:class:`~rllm_agents.types.EnvRecord` - the env's id and arguments (from an
:class:`~rllm_agents.execution.env_spec.EnvSpec` factory, or the env's Gymnasium spec), the
reset seed and task, and every action with the env's raw answer - which is what
``rllm-eval replay`` and ``rllm-eval rescore`` read (docs/agents/episodes.md). ``policy`` (model name
and version) is stamped on every episode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rllm_envs.core.loading import load_attr

from rllm_agents.agents.base import BaseAgent
from rllm_agents.chat import (
    TokenConversation,
    encode,
    parse_tool_calls,
    template_rewrites_history,
    tool_calls_to_text,
)
from rllm_agents.chat.tool_calls import parse_openai_tool_calls
from rllm_agents.engines.base import ContextOverflow, ModelOutput, SamplingParams
from rllm_agents.engines.slots import QUEUE_CLOCK, QueueClock
from rllm_agents.engines.weight_sync import record_policy_version
from rllm_agents.execution.dispatch import (
    DISPATCH_MODES,
    Dispatch,
    check_dispatch,
    request_seed,
    wait_for_own_time,
)
from rllm_agents.execution.env_slot import EnvSlot, FactoryProbe, LoopPacer, check_call_policy
from rllm_agents.execution.env_spec import EnvIdentity, env_identity
from rllm_agents.execution.progress import RewardProgress
from rllm_agents.metrics import summarize_episodes
from rllm_agents.run_folder import fault_point
from rllm_agents.types import (
    EnvRecord,
    Episode,
    Step,
    TerminationReason,
    Trajectory,
    Transition,
    kept_info,
)


class EpisodeEnded(Exception):
    """Ends the turn loop early with a termination reason (budgets)."""

    def __init__(self, reason: TerminationReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


@dataclasses.dataclass
class _Run:
    """The live state of one episode (kept outside the coroutine so a timeout keeps it)."""

    index: int
    task: dict[str, Any] | None
    seed: int | None
    agent: BaseAgent
    conversation: TokenConversation | None = None
    last_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    reset_task_id: Any = None  # many envs name their task only in reset's info
    prompt_tokens: int = 0
    completion_tokens: int = 0
    env_reward: float = 0.0  # the env's rewards summed, for agents that do not record them
    env_record: EnvRecord | None = None
    started_at: float = dataclasses.field(default_factory=time.time)


class AgentExecutionEngine:
    """Runs agents against envs with a rollout engine (see the module docstring).

    Two forms, one implementation: the factory form below, or rLLM's documented keyword form
    (``agent_class``, ``agent_args``, ``env_class``, ``env_args``, ``engine_name``,
    ``rollout_engine_args``, ``sampling_params`` with ``"model"``, ``max_response_length``,
    ``max_prompt_length``, ``n_parallel_agents``), which
    :mod:`rllm_agents.execution.keyword_form` turns into the factory form; an engine it makes
    is closed by :meth:`close`.

    Args:
        agent_factory: makes a fresh agent per episode.
        env_factory: makes an env (called on the env's own thread; envs are reused per slot).
        engine: a :class:`~rllm_agents.engines.base.RolloutEngine`.
        tokenizer: enables token-level rendering (with ``token_level=True``).
        seed: task i is reset with seed ``seed + i`` (None: unseeded).
        output_path: stream each finished episode to this JSONL file.
        output_append: add to `output_path` instead of replacing it (a resumed evaluation).
        progress: show a progress bar (None: only when stderr is a terminal).
        env_calls: where env calls run - ``"auto"`` (through ``areset`` / ``astep`` on the
            event loop when the env declares ``metadata["rllm.native_async"]``, on the loop
            when it declares ``metadata["rllm.inline_safe"]``, else on its own worker thread;
            the factory's later envs are made accordingly), ``"thread"``, ``"inline"`` or
            ``"async"`` (forced; see :mod:`rllm_agents.execution.env_slot`).
        dispatch: ``"async"`` or ``"lockstep"`` (see the module docstring); lockstep runs
            every task of a call at once, whatever ``n_parallel`` says.
        sampling_seed: seeds each model request from (this, episode index, turn).
        max_context_tokens: the longest prompt any turn may have (None: no limit).
        executor: where episodes run - ``"inline"`` (this process), ``"ray"`` (workers of a
            Ray cluster, :mod:`rllm_agents.execution.ray_executor`; or pass a configured
            ``RayExecutor``). Same API and results either way; ``close()`` releases workers.
        record_env: record each episode's env calls (an EnvRecord, for replay and re-score).
        policy: who plays, stamped on every episode (``{"name": ..., "version": ...}``).
    """

    def __init__(
        self,
        agent_factory: Callable[[], BaseAgent] | None = None,
        env_factory: Callable[[], Any] | None = None,
        engine: Any = None,
        *,
        agent_class: type[BaseAgent] | None = None,
        agent_args: dict[str, Any] | None = None,
        env_class: type | str | None = None,
        env_args: dict[str, Any] | None = None,
        engine_name: str | None = None,
        rollout_engine_args: dict[str, Any] | None = None,
        sampling_params: dict[str, Any] | None = None,
        max_response_length: int | None = None,
        max_prompt_length: int | None = None,
        n_parallel_agents: int | None = None,
        tokenizer: Any = None,
        n_parallel: int = 8,
        max_turns: int = 8,
        max_prompt_tokens: int | None = None,
        max_response_tokens: int | None = None,
        trajectory_timeout: float | None = None,
        sampling: SamplingParams | None = None,
        token_level: bool = True,
        seed: int | None = 0,
        output_path: str | Path | None = None,
        output_append: bool = False,
        progress: bool | None = None,
        env_calls: str = "auto",
        dispatch: str = "async",
        sampling_seed: int | None = None,
        max_context_tokens: int | None = None,
        executor: str | Any = "inline",
        record_env: bool = True,
        policy: dict[str, Any] | None = None,
    ) -> None:
        self._owned_engine = None
        if agent_class is not None or env_class is not None:
            if agent_factory is not None or env_factory is not None or engine is not None:
                raise TypeError("pass agent_class/env_class or the factories, not both")
            if agent_class is None or env_class is None:
                raise TypeError("the keyword form needs both agent_class and env_class")
            from rllm_agents.execution.keyword_form import factory_form

            form = factory_form(
                agent_class=agent_class,
                env_class=env_class,
                agent_args=agent_args,
                env_args=env_args,
                engine_name=engine_name or "openai",
                rollout_engine_args=rollout_engine_args,
                tokenizer=tokenizer,
                sampling_params=sampling_params,
                max_response_length=max_response_length,
                max_prompt_length=max_prompt_length,
                n_parallel_agents=n_parallel_agents,
            )
            agent_factory, env_factory, engine = form.agent_factory, form.env_factory, form.engine
            self._owned_engine = engine
            options = form.options
            sampling = options["sampling"]
            n_parallel = options.get("n_parallel", n_parallel)
            max_prompt_tokens = options.get("max_prompt_tokens", max_prompt_tokens)
            max_response_tokens = options.get("max_response_tokens", max_response_tokens)
        elif agent_factory is None or env_factory is None:
            # engine may be None: an executor that brings its own (Ray workers' HTTP clients).
            raise TypeError("AgentExecutionEngine needs agent_factory and env_factory")
        if n_parallel < 1 or max_turns < 1:
            raise ValueError("n_parallel and max_turns must be at least 1")
        check_call_policy(env_calls, "env_calls")
        check_dispatch(dispatch)
        self.agent_factory = agent_factory
        self.env_factory = env_factory
        self.engine = engine
        self.tokenizer = tokenizer
        self.n_parallel = n_parallel
        self.max_turns = max_turns
        self.max_prompt_tokens = max_prompt_tokens
        self.max_response_tokens = max_response_tokens
        self.trajectory_timeout = trajectory_timeout
        self.sampling = sampling or SamplingParams()
        self.token_level = token_level and tokenizer is not None
        self.seed = seed
        self.output_path = Path(output_path) if output_path else None
        self.output_append = output_append
        self.progress = progress
        self.env_calls = env_calls
        self.dispatch = dispatch
        self.sampling_seed = sampling_seed
        self.max_context_tokens = max_context_tokens
        self.executor = resolve_executor(executor)
        self.record_env = record_env
        self.policy = dict(policy or {})
        self._env_identity: EnvIdentity | None = None  # learnt from the first env made
        self.last_metrics: dict[str, Any] = {}
        self._rewrites_history: bool | None = None
        # How the factory's first env is called (env_slot.call_mode), kept for later runs.
        self._factory_mode: str | None = None

    # ---- public API -------------------------------------------------------------------------
    async def execute_tasks(
        self, tasks: Iterable[dict[str, Any]], seeds: list[int | None] | None = None
    ) -> list[Episode]:
        """One Episode per task row (a list or a TaskSet), in order."""
        tasks = [dict(task) for task in tasks]
        if seeds is None:
            seeds = [None if self.seed is None else self.seed + i for i in range(len(tasks))]
        return await self._execute(list(zip(tasks, seeds, strict=True)))

    async def execute_seeds(self, seeds: Iterable[int]) -> list[Episode]:
        """One Episode per seed, the env drawing its own task from the seed."""
        return await self._execute([(None, seed) for seed in seeds])

    def run(
        self, tasks: list[dict[str, Any]] | None = None, seeds: list[int] | None = None
    ) -> list[Episode]:
        """Blocking helper: tasks (optionally seeded) or seeds alone."""
        if tasks is None:
            return asyncio.run(self.execute_seeds(seeds or []))
        return asyncio.run(self.execute_tasks(tasks, seeds))

    def local_episodes(self, count: int) -> LocalEpisodes:
        """Episodes on `count` env slots of this process (what executors run them with)."""
        return LocalEpisodes(self, count)

    def close(self) -> None:
        """Release what the executor holds between runs (a Ray executor's workers), and the
        rollout engine when the keyword form made it."""
        self.executor.close()
        engine, self._owned_engine = self._owned_engine, None
        if engine is not None:
            release = getattr(engine, "close", None)
            if release is not None:
                release()
            else:
                asyncio.run(engine.aclose())

    # ---- the run ----------------------------------------------------------------------------
    async def _execute(self, jobs: list[tuple[dict[str, Any] | None, int | None]]) -> list[Episode]:
        if self.token_level and self._rewrites_history is None:
            self._rewrites_history = template_rewrites_history(self.tokenizer)
        # A lockstep round waits for every running episode: all of them must have a slot.
        parallel = len(jobs) if self.dispatch == "lockstep" else min(self.n_parallel, len(jobs))
        source = await self.executor.open(self, parallel)
        sink = (
            self.output_path.open("a" if self.output_append else "w", encoding="utf-8")
            if self.output_path
            else None
        )
        started = time.perf_counter()
        written = [0]  # episodes in the sink so far
        try:
            with RewardProgress(len(jobs), "rollout", self.progress) as progress:

                async def one(index: int, task: dict[str, Any] | None, seed: int | None) -> Episode:
                    episode = await source.run(index, task, seed)
                    if sink is not None:
                        sink.write(episode.to_json() + "\n")
                        sink.flush()
                        written[0] += 1
                        fault_point("episode_written", written[0])  # tests kill -9 here
                    progress.advance(episode.reward)
                    return episode

                episodes = await asyncio.gather(
                    *(one(i, task, seed) for i, (task, seed) in enumerate(jobs))
                )
        finally:
            if sink is not None:
                sink.close()
            await source.aclose()
        wall = time.perf_counter() - started
        self.last_metrics = self._run_metrics(list(episodes), wall)
        self.last_metrics.update(source.metrics)
        return list(episodes)

    def _run_metrics(self, episodes: list[Episode], wall: float) -> dict[str, Any]:
        metrics = summarize_episodes(episodes)
        metrics["wall_time"] = wall
        metrics["episodes_per_s"] = len(episodes) / wall if wall > 0 else 0.0
        metrics["completion_tokens_per_s"] = (
            metrics["completion_tokens"] / wall if wall > 0 else 0.0
        )
        if self._rewrites_history is not None:
            metrics["template_rewrites_history"] = self._rewrites_history
        return metrics

    async def _episode(
        self,
        slot: EnvSlot,
        dispatch: Dispatch,
        index: int,
        task: dict[str, Any] | None,
        seed: int | None,
    ) -> Episode:
        run = _Run(index=index, task=task, seed=seed, agent=self.agent_factory())
        run.agent.reset()
        reason: TerminationReason
        error: str | None = None
        # This episode's own clock of time queued for the engine's serving slots; the task
        # running the turns inherits it (each episode runs in its own task and context).
        clock = QueueClock()
        clock_token = QUEUE_CLOCK.set(clock)
        try:
            reason = await wait_for_own_time(
                self._turns(slot, dispatch, run),
                self.trajectory_timeout,
                lambda: dispatch.waited(index) + clock.waited(),
            )
        except asyncio.TimeoutError:
            reason, error = (
                TerminationReason.TIMEOUT,
                (f"episode exceeded trajectory_timeout={self.trajectory_timeout}s"),
            )
            slot.discard()  # an env call may still be running on the slot's thread
        except _ModelFailure as exc:
            reason, error = TerminationReason.ERROR, str(exc)
        except Exception as exc:  # noqa: BLE001 - every failure must still yield an Episode
            reason, error = TerminationReason.ERROR, f"{type(exc).__name__}: {exc}"
            slot.discard()  # the env (or the agent on its output) raised: do not reuse the env
        finally:
            QUEUE_CLOCK.reset(clock_token)
        return self._build_episode(run, reason, error)

    async def _turns(self, slot: EnvSlot, dispatch: Dispatch, run: _Run) -> TerminationReason:
        options = {"task": run.task} if run.task is not None else None
        started = time.perf_counter()
        observation, info = await slot.call("reset", seed=run.seed, options=options)
        reset_time = time.perf_counter() - started
        run.last_info = dict(info)
        run.reset_task_id = info.get("task_id")
        if self.record_env:
            run.env_record = self._env_record(slot, run, options, observation, info)
        run.agent.update_from_env(observation, 0.0, False, info)
        if info.get("failure"):
            return TerminationReason.ENV_FAILURE
        if self.token_level:
            run.conversation = TokenConversation(self.tokenizer, tools=run.agent.tools)
        for turn in range(self.max_turns):
            try:
                output, llm_time, prompt_ids = await self._generate(dispatch, run, turn)
            except EpisodeEnded as ended:
                return ended.reason
            response = _response_text(output)
            action = run.agent.update_from_model(response)
            step = run.agent.trajectory.steps[-1] if run.agent.trajectory.steps else Step()
            _record_turn(step, output, prompt_ids, llm_time)
            started = time.perf_counter()
            observation, reward, terminated, truncated, info = await slot.call(
                "step", action.action
            )
            step.env_time = time.perf_counter() - started + (reset_time if turn == 0 else 0.0)
            run.last_info = dict(info)
            run.env_reward += float(reward)
            if run.env_record is not None:
                run.env_record.transitions.append(
                    Transition(action.action, observation, reward, terminated, truncated,
                               kept_info(info))
                )  # fmt: skip
            run.agent.update_from_env(observation, reward, terminated or truncated, info)
            record_outcome(step, reward, terminated or truncated, info)
            # Agents commonly set the step's info to the env's, replacing what the engine said.
            record_policy_version(step.info, output)
            ending = env_ending(info, terminated, truncated)
            if ending is not None:
                return ending
            if self._response_budget_left(run) == 0:
                return TerminationReason.RESPONSE_TOO_LONG
        return TerminationReason.MAX_TURNS

    async def _generate(
        self, dispatch: Dispatch, run: _Run, turn: int
    ) -> tuple[ModelOutput, float, list[int]]:
        messages = run.agent.chat_completions
        sampling = self.sampling
        prompt_ids: list[int] = []
        if run.conversation is not None:
            prompt_ids = list(run.conversation.prompt_ids(messages))
            first_prompt = run.conversation.segments[0].prompt_ids
            if self.max_prompt_tokens is not None and len(first_prompt) > self.max_prompt_tokens:
                raise EpisodeEnded(TerminationReason.PROMPT_TOO_LONG)
            if self.max_context_tokens is not None and len(prompt_ids) > self.max_context_tokens:
                raise EpisodeEnded(TerminationReason.PROMPT_TOO_LONG)
        budget = self._response_budget_left(run)
        if budget == 0:
            raise EpisodeEnded(TerminationReason.RESPONSE_TOO_LONG)
        if budget is not None and budget < sampling.max_tokens:
            sampling = dataclasses.replace(sampling, max_tokens=budget)
        if self.sampling_seed is not None:
            seed = request_seed(self.sampling_seed, run.index, turn)
            sampling = dataclasses.replace(sampling, seed=seed)
        call: dict[str, Any] = {"sampling": sampling, "tools": run.agent.tools}
        if run.conversation is not None:
            call["prompt_ids"] = prompt_ids
        else:
            call["messages"] = messages
        started = time.perf_counter()
        try:
            output = await dispatch.generate(run.index, call)
        except ContextOverflow:
            # The conversation outgrew the model's context (the engine or its server says so):
            # the episode's own length, not a failing server, so it ends as a prompt budget
            # would end it, and is scored, instead of counting as an infrastructure failure.
            raise EpisodeEnded(TerminationReason.PROMPT_TOO_LONG) from None
        except Exception as exc:
            raise _ModelFailure(f"{type(exc).__name__}: {exc}") from exc
        llm_time = time.perf_counter() - started
        completion_ids = list(output.completion_ids)
        if run.conversation is not None:
            if not completion_ids:  # an engine that returns text only: tokenise it ourselves
                completion_ids = encode(self.tokenizer, output.text)
            run.conversation.add_completion(completion_ids, list(output.logprobs) or None)
        run.prompt_tokens += (
            len(prompt_ids) or output.prompt_length or output.usage.get("prompt_tokens", 0)
        )
        # Text-only engines still report one logprob per generated token when asked, or at
        # least the server's count.
        run.completion_tokens += (
            len(completion_ids) or len(output.logprobs) or output.usage.get("completion_tokens", 0)
        )
        return output, llm_time, prompt_ids

    def _env_record(
        self,
        slot: EnvSlot,
        run: _Run,
        options: dict[str, Any] | None,
        observation: Any,
        info: dict[str, Any],
    ) -> EnvRecord:
        if self._env_identity is None:  # one factory, one identity: read it once per engine
            self._env_identity = env_identity(self.env_factory, slot.env)
        identity = self._env_identity
        return EnvRecord(
            api=identity.api,
            id=identity.id,
            kwargs=identity.kwargs,
            seed=run.seed,
            options=options,
            reset_observation=observation,
            reset_info=kept_info(info),
        )

    def _response_budget_left(self, run: _Run) -> int | None:
        if self.max_response_tokens is None:
            return None
        used = (
            run.conversation.response_length
            if run.conversation is not None
            else run.completion_tokens
        )
        return max(self.max_response_tokens - used, 0)

    def _build_episode(self, run: _Run, reason: TerminationReason, error: str | None) -> Episode:
        trajectory = run.agent.trajectory
        trajectory.task = run.task
        if not trajectory.reward and run.env_reward:  # an agent that keeps no rewards (rLLM's)
            trajectory.reward = run.env_reward
        record_tokens(trajectory, run.conversation)
        steps = trajectory.steps
        task_key = _task_key(run)
        return Episode(
            id=f"{task_key}:{run.index}",
            task=run.task if run.task is not None else {"seed": run.seed},
            termination_reason=reason,
            trajectories=[trajectory],
            is_correct=run.last_info.get("is_correct"),
            failure=run.last_info.get("failure"),
            error=error,
            metrics={
                "turns": float(len(steps)),
                "llm_time": sum(step.llm_time for step in steps),
                "queue_time": sum(step.queue_time for step in steps),
                "env_time": sum(step.env_time for step in steps),
                "prompt_tokens": float(run.prompt_tokens),
                "completion_tokens": float(run.completion_tokens),
            },
            info={"task_key": task_key, "seed": run.seed},
            env=run.env_record,
            policy=dict(self.policy),
            timings={"started_at": run.started_at, "finished_at": time.time()},
        )


def env_ending(info: dict[str, Any], terminated: bool, truncated: bool) -> TerminationReason | None:
    """How a step's result ends the episode, if it does (an env failure outranks the rest)."""
    if info.get("failure"):
        return TerminationReason.ENV_FAILURE
    if terminated:
        return TerminationReason.ENV_DONE
    if truncated:
        return TerminationReason.ENV_TRUNCATED
    return None


def record_outcome(step: Step, reward: float, done: bool, info: dict[str, Any]) -> None:
    """What the env said of a step, on the step, where the agent left it unset: rLLM-style
    agents record only the messages and leave rewards to the engine."""
    if not step.reward:
        step.reward = float(reward)
    step.done = step.done or done
    if not step.info:
        step.info = dict(info)


def record_tokens(trajectory: Trajectory, conversation: TokenConversation | None) -> None:
    """Put a token-in/token-out conversation on its trajectory: the whole token list when the
    conversation is prefix-consistent (one sequence holds every prompt the model saw), and
    in any case how many segments it took."""
    if conversation is None or not conversation.segments:
        return
    trajectory.info["prefix_consistent"] = conversation.prefix_consistent
    trajectory.info["token_segments"] = len(conversation.segments)
    if conversation.prefix_consistent:
        segment = conversation.segments[0]
        trajectory.prompt_ids = list(segment.prompt_ids)
        trajectory.response_ids = list(segment.response_ids)
        trajectory.response_mask = list(segment.response_mask)
        trajectory.response_logprobs = list(segment.response_logprobs)


def _task_key(run: _Run) -> str:
    """What groups samples of the same task (for pass@k): the task id the env gave (in its last
    info, else in reset's), else the seed, else the position."""
    task_id = run.last_info.get("task_id", run.reset_task_id)
    if task_id is not None:
        return str(task_id)
    if run.task is None and run.seed is not None:
        return f"seed-{run.seed}"
    return str(run.index)


class LocalEpisodes:
    """Episodes of `runner` on `count` env slots of this process, each slot reusing its env.

    The inline executor's run, and a Ray worker's for as long as it serves a run. Every
    episode index below `count` is announced to the dispatch up front: a lockstep run gets a
    slot per episode and waits for all of them each round.
    """

    def __init__(self, runner: AgentExecutionEngine, count: int) -> None:
        self._runner = runner
        self._probe = FactoryProbe(mode=runner._factory_mode)
        pacer = LoopPacer()
        self._slots = [
            EnvSlot(runner.env_factory, f"rllm-env-{i}", runner.env_calls, self._probe, pacer)
            for i in range(count)
        ]
        self._free: asyncio.Queue[EnvSlot] = asyncio.Queue()
        for slot in self._slots:
            self._free.put_nowait(slot)
        self._dispatch: Dispatch = DISPATCH_MODES[runner.dispatch](runner.engine)
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
    """Episodes in this process, `count` at once (the default executor, of either engine).

    An executor opens a run with ``await open(runner, count)``, which returns what runs its
    episodes (``run``, ``aclose``, ``metrics``), and ``close()`` releases what it keeps between
    runs.
    """

    async def open(self, runner: Any, count: int) -> Any:
        return runner.local_episodes(count)

    def close(self) -> None:
        """Nothing outlives a run here."""


# Executors by name; an executor object (e.g. a configured RayExecutor) may be passed instead.
EXECUTORS: dict[str, str] = {
    "inline": "rllm_agents.execution.engine:InlineExecutor",
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


class _ModelFailure(Exception):
    """The rollout engine raised (after its own retries); the env is fine and is kept."""


def _response_text(output: ModelOutput) -> str:
    """The model's reply, with structured tool calls written as ``<tool_call>`` blocks."""
    text = output.text or ""
    if output.tool_calls and not parse_tool_calls(text):
        calls = tool_calls_to_text(parse_openai_tool_calls(output.tool_calls))
        text = f"{text}\n{calls}" if text else calls
    return text


def _record_turn(step: Step, output: ModelOutput, prompt_ids: list[int], llm_time: float) -> None:
    step.prompt_ids = prompt_ids or list(output.prompt_ids)
    step.response_ids = list(output.completion_ids)
    step.logprobs = list(output.logprobs)
    step.finish_reason = output.finish_reason
    step.llm_time = llm_time
    step.queue_time = output.queue_time
    record_policy_version(step.info, output)


def episodes_to_jsonl(episodes: Iterable[Episode], path: str | Path) -> None:
    """Write episodes one JSON object a line."""
    with Path(path).open("w", encoding="utf-8") as sink:
        for episode in episodes:
            sink.write(json.dumps(episode.to_dict(), ensure_ascii=False) + "\n")
