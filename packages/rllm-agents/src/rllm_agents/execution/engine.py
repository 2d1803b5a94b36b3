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
so far), for a trainer whose sequences must fit in memory: a prompt past it ends the episode,
or, with a compaction policy (``EpisodeLimits.compaction``), is compacted and the episode
goes on in a new token sequence (:mod:`rllm_agents.execution.compaction`).

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
import time
from collections.abc import Callable, Iterable
from typing import Any

from rllm_agents.agents.base import BaseAgent
from rllm_agents.chat import TokenConversation, encode, template_rewrites_history
from rllm_agents.engines.base import ContextOverflow, ModelOutput, SamplingParams
from rllm_agents.engines.slots import QUEUE_CLOCK, QueueClock
from rllm_agents.engines.weight_sync import record_policy_version
from rllm_agents.execution.context_budget import BudgetContext, fit_context
from rllm_agents.execution.dispatch import Dispatch, request_seed, wait_for_own_time
from rllm_agents.execution.env_slot import EnvSlot
from rllm_agents.execution.env_spec import EnvIdentity, env_identity
from rllm_agents.execution.executors import LocalEpisodes, resolve_executor
from rllm_agents.execution.keyword_form import KEYWORDS, read_keyword_form
from rllm_agents.execution.settings import (
    EpisodeLimits,
    Recording,
    RunOutput,
    Scheduling,
    grouped_settings,
)
from rllm_agents.execution.streaming import stream_episodes
from rllm_agents.execution.turns import (
    EpisodeEnded,
    EpisodeRun,
    ModelFailure,
    build_episode,
    env_ending,
    record_outcome,
    record_turn,
    response_text,
)
from rllm_agents.metrics import summarize_episodes
from rllm_agents.types import EnvRecord, Episode, Step, TerminationReason, Transition, kept_info


class AgentExecutionEngine:
    """Runs agents against envs with a rollout engine (see the module docstring).

    Args:
        agent_factory: makes a fresh agent per episode.
        env_factory: makes an env (called on the env's own thread; envs are reused per slot).
        engine: a :class:`~rllm_agents.engines.base.RolloutEngine` (None: an executor that
            brings its own, as Ray workers' HTTP clients do).
        tokenizer: enables token-level rendering (with ``token_level=True``).
        sampling: each request's sampling settings (a turn's ``max_tokens`` is cut to the
            episode's response budget).
        seed: task i is reset with seed ``seed + i`` (None: unseeded).
        token_level: render token-in/token-out when there is a tokenizer.
        executor: where episodes run - ``"inline"`` (this process), ``"ray"`` (workers of a
            Ray cluster, :mod:`rllm_agents.execution.ray_executor`), or a configured
            ``RayExecutor``. Same API and results either way; ``close()`` releases workers.
        limits: what ends an episode - :class:`~rllm_agents.execution.settings.EpisodeLimits`
            (``max_turns``, token budgets, ``trajectory_timeout``).
        scheduling: how episodes share the machine and model -
            :class:`~rllm_agents.execution.settings.Scheduling` (``n_parallel``, ``dispatch``
            "async" or "lockstep", ``sampling_seed``, ``env_calls``).
        output: what the run writes and shows -
            :class:`~rllm_agents.execution.settings.RunOutput` (``output_path``, a JSONL file
            each finished episode is streamed to; ``output_append``; ``progress``).
        recording: what each episode carries -
            :class:`~rllm_agents.execution.settings.Recording` (``record_env``: the env's calls,
            for replay and re-score; ``policy``: who played, ``{"name": ..., "version": ...}``).
        **settings: any field of those groups on its own (``n_parallel=16, max_turns=4``), laid
            over its group; or rLLM's documented keyword form (``agent_class``, ``agent_args``,
            ``env_class``, ``env_args``, ``engine_name``, ``rollout_engine_args``,
            ``sampling_params`` with ``"model"``, ``max_response_length``,
            ``max_prompt_length``, ``n_parallel_agents``) in place of the factories and engine,
            read by :mod:`rllm_agents.execution.keyword_form`; an engine it makes is closed by
            :meth:`close`.
    """

    def __init__(
        self,
        agent_factory: Callable[[], BaseAgent] | None = None,
        env_factory: Callable[[], Any] | None = None,
        engine: Any = None,
        *,
        tokenizer: Any = None,
        sampling: SamplingParams | None = None,
        seed: int | None = 0,
        token_level: bool = True,
        executor: str | Any = "inline",
        limits: EpisodeLimits | None = None,
        scheduling: Scheduling | None = None,
        output: RunOutput | None = None,
        recording: Recording | None = None,
        **settings: Any,
    ) -> None:
        rllm_keywords = {name: settings.pop(name) for name in KEYWORDS if name in settings}
        self._owned_engine = None
        if rllm_keywords:
            given = (agent_factory, env_factory, engine)
            form = read_keyword_form(rllm_keywords, tokenizer, given=given)
            agent_factory, env_factory, engine = form.agent_factory, form.env_factory, form.engine
            self._owned_engine = engine
            sampling = form.sampling
            settings.update(form.settings)
        elif agent_factory is None or env_factory is None:
            raise TypeError("AgentExecutionEngine needs agent_factory and env_factory")
        given_groups = {
            "limits": limits,
            "scheduling": scheduling,
            "output": output,
            "recording": recording,
        }
        try:
            groups = grouped_settings(given_groups, settings)
        except (TypeError, ValueError):
            self.close_owned_engine()  # made by the keyword form: nothing else will close it
            raise
        self.limits: EpisodeLimits = groups["limits"]
        self.scheduling: Scheduling = groups["scheduling"]
        self.output: RunOutput = groups["output"]
        self.recording: Recording = groups["recording"]
        self.agent_factory = agent_factory
        self.env_factory = env_factory
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingParams()
        self.token_level = token_level and tokenizer is not None
        self.seed = seed
        self.executor = resolve_executor(executor)
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
        self.close_owned_engine()

    def close_owned_engine(self) -> None:
        """Close the rollout engine the keyword form made, if it did (once)."""
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
        lockstep = self.scheduling.dispatch == "lockstep"
        parallel = len(jobs) if lockstep else min(self.scheduling.n_parallel, len(jobs))
        source = await self.executor.open(self, parallel)
        try:
            episodes, wall = await stream_episodes(
                len(jobs), lambda i: source.run(i, *jobs[i]), self.output, "rollout"
            )
        finally:
            await source.aclose()
        self.last_metrics = self._run_metrics(episodes, wall)
        self.last_metrics.update(source.metrics)
        return episodes

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
        run = EpisodeRun(index=index, task=task, seed=seed, agent=self.agent_factory())
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
                self.limits.trajectory_timeout,
                lambda: dispatch.waited(index) + clock.waited(),
            )
        except asyncio.TimeoutError:
            reason, error = (
                TerminationReason.TIMEOUT,
                (f"episode exceeded trajectory_timeout={self.limits.trajectory_timeout}s"),
            )
            slot.discard()  # an env call may still be running on the slot's thread
        except ModelFailure as exc:
            reason, error = TerminationReason.ERROR, str(exc)
        except Exception as exc:  # noqa: BLE001 - every failure must still yield an Episode
            reason, error = TerminationReason.ERROR, f"{type(exc).__name__}: {exc}"
            slot.discard()  # the env (or the agent on its output) raised: do not reuse the env
        finally:
            QUEUE_CLOCK.reset(clock_token)
        return build_episode(run, reason, error, self.recording.policy)

    async def _turns(self, slot: EnvSlot, dispatch: Dispatch, run: EpisodeRun) -> TerminationReason:
        options = {"task": run.task} if run.task is not None else None
        started = time.perf_counter()
        observation, info = await slot.call("reset", seed=run.seed, options=options)
        reset_time = time.perf_counter() - started
        run.last_info = dict(info)
        run.reset_task_id = info.get("task_id")
        if self.recording.record_env:
            run.env_record = self._env_record(slot, run, options, observation, info)
        run.agent.update_from_env(observation, 0.0, False, info)
        if info.get("failure"):
            return TerminationReason.ENV_FAILURE
        if self.token_level:
            run.conversation = TokenConversation(self.tokenizer, tools=run.agent.tools)
        for turn in range(self.limits.max_turns):
            try:
                output, llm_time, prompt_ids = await self._generate(dispatch, run, turn)
            except EpisodeEnded as ended:
                return ended.reason
            response = response_text(output)
            action = run.agent.update_from_model(response)
            step = run.agent.trajectory.steps[-1] if run.agent.trajectory.steps else Step()
            record_turn(step, output, prompt_ids, llm_time)
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
        self, dispatch: Dispatch, run: EpisodeRun, turn: int
    ) -> tuple[ModelOutput, float, list[int]]:
        messages = run.context.messages(run.agent.chat_completions)
        sampling, limits = self.sampling, self.limits
        prompt_ids: list[int] = []
        if run.conversation is not None:
            if limits.compaction.enabled and limits.max_context_tokens is not None:
                fit = BudgetContext(
                    limits.max_context_tokens,
                    limits.compaction,
                    sampling,
                    self.tokenizer,
                    self.scheduling.sampling_seed,
                )
                messages = await fit_context(dispatch, run, turn, messages, fit)
            prompt_ids = list(run.conversation.prompt_ids(messages))
            first_prompt = run.conversation.segments[0].prompt_ids
            if _over(first_prompt, limits.max_prompt_tokens) or _over(
                prompt_ids, limits.max_context_tokens
            ):
                raise EpisodeEnded(TerminationReason.PROMPT_TOO_LONG)
        budget = self._response_budget_left(run)
        if budget == 0:
            raise EpisodeEnded(TerminationReason.RESPONSE_TOO_LONG)
        if budget is not None and budget < sampling.max_tokens:
            sampling = dataclasses.replace(sampling, max_tokens=budget)
        if self.scheduling.sampling_seed is not None:
            seed = request_seed(self.scheduling.sampling_seed, run.index, turn)
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
            raise ModelFailure(f"{type(exc).__name__}: {exc}") from exc
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
        run: EpisodeRun,
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

    def _response_budget_left(self, run: EpisodeRun) -> int | None:
        if self.limits.max_response_tokens is None:
            return None
        used = (
            run.conversation.response_length
            if run.conversation is not None
            else run.completion_tokens
        )
        return max(self.limits.max_response_tokens - used, 0)


def _over(ids: list[int], limit: int | None) -> bool:
    return limit is not None and len(ids) > limit
