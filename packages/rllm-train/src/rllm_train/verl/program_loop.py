"""`RllmProgramLoop`: an agent program as a verl agent loop (registered as ``rllm_program``).

An agent program (docs/agents/gateway.md) is code that talks to its model over the OpenAI API.
In each verl ``AgentLoopWorker`` process the loop keeps one :class:`WorkerPrograms`: the
program's :class:`~rllm_agents.programs.ProgramWorkflows` - its gateway, started on the
worker's event loop with the first sample and stopped when the worker process exits, in front
of :class:`~rllm_train.verl.program_engine.ServerManagerEngine` (verl's rollout servers), and
the env that grades the program's answers. Each sample is then one
:class:`~rllm_agents.programs.ProgramWorkflow` episode, the runner ``rllm-eval`` and the native
trainer use: open a session, run the program on the task row, close the session, build the
session's token-exact sequences, score it. :mod:`rllm_train.verl.program_output` turns the
episode into verl's one sequence per sample (and says which one, when the session split).

Sampling: the step's temperature and top-p (the validation ones in a validation pass) and
``rollout.max_response_tokens`` per call are the session defaults; a program that sets its
own values in a request keeps them, as on the native backend. A failed run is tried again up
to ``program.retries`` times, then trained on as a failure (mask zeroed, reward 0).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import uuid
import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rllm_agents.engines.base import SamplingParams
from rllm_agents.programs import EnvGrader, ProgramWorkflow, ProgramWorkflows, program_jobs
from rllm_agents.types import Episode
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from rllm_train.verl.compose import PROGRAM_LOOP_NAME
from rllm_train.verl.data import EpisodeSource, from_verl_row
from rllm_train.verl.episode_parts import make_env
from rllm_train.verl.program_engine import ServerManagerEngine
from rllm_train.verl.program_output import (
    ProgramSample,
    SampleLimits,
    placeholder_sample,
    program_sample,
)
from rllm_train.verl.program_ref import ProgramRef

logger = logging.getLogger(__name__)


def _program_key(source: EpisodeSource) -> tuple[ProgramRef, str, str]:
    """Samples that share a gateway and a grader: the same program on the same env."""
    assert source.program is not None
    return source.program, source.env_id, json.dumps(dict(source.env_kwargs), sort_keys=True)


def _timeout(program: ProgramRef, episode_timeout_s: float | None) -> float | None:
    limits = [limit for limit in (program.timeout_s, episode_timeout_s) if limit]
    return min(limits) if limits else None


@dataclass
class WorkerPrograms:
    """What one agent-loop worker process keeps for its program samples (module docstring)."""

    engine: ServerManagerEngine
    runs: dict[tuple[ProgramRef, str, str], ProgramWorkflows] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop | None = None

    def workflows(self, source: EpisodeSource) -> ProgramWorkflows:
        key = _program_key(source)
        if key not in self.runs:
            program = source.program
            assert program is not None
            self.runs[key] = ProgramWorkflows(
                program.load(),
                self.engine,
                tokenizer=self.engine.tokenizer,
                grader=EnvGrader(partial(make_env, source)),
                timeout_s=_timeout(program, source.timeout_s),
            )
            if self.loop is None:  # the gateways run on the worker's loop: stop them there
                self.loop = asyncio.get_running_loop()
                atexit.register(self.close_at_exit)
        return self.runs[key]

    async def aclose(self) -> None:
        """Stop every gateway and close the graders' envs (each even if another fails)."""
        runs, self.runs = list(self.runs.values()), {}
        failures = []
        for workflows in runs:
            try:
                await workflows.aclose()
            except Exception as error:  # noqa: BLE001 - the others are still closed
                failures.append(error)
        if failures:
            raise failures[0]

    def close_at_exit(self) -> None:
        """At the worker's exit: every sample is done by then (verl awaits them all), so only
        the gateways' listening sockets and the graders' envs are left to close."""
        loop = self.loop
        if loop is None or loop.is_closed() or loop.is_running() or not self.runs:
            return
        try:
            loop.run_until_complete(self.aclose())
        except Exception:  # noqa: BLE001 - the process is exiting; say what was left open
            logger.exception("closing the agent-program gateways at exit failed")


# verl makes a new agent-loop object for every sample and gives the loop no hook of its own
# for a worker's lifetime, so the one piece of state a worker shares across samples - its
# gateway - is kept here, keyed by the worker's server manager (one per AgentLoopWorker),
# and goes when that does.
_WORKERS: weakref.WeakKeyDictionary[Any, WorkerPrograms] = weakref.WeakKeyDictionary()


def worker_programs(server_manager: Any, tokenizer: Any, top_k: int) -> WorkerPrograms:
    if server_manager not in _WORKERS:
        _WORKERS[server_manager] = WorkerPrograms(
            ServerManagerEngine(server_manager, tokenizer, top_k=top_k)
        )
    return _WORKERS[server_manager]


@register(PROGRAM_LOOP_NAME)
class RllmProgramLoop(AgentLoopBase):
    """Runs one agent-program episode per verl sample (see the module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        source = from_verl_row(kwargs)
        if source.program is None:
            raise ValueError(
                f"agent loop {PROGRAM_LOOP_NAME!r} got a row without a program (rllm_program)"
            )
        if source.task is None:
            raise ValueError("an agent program plays task rows, and this row has none")
        limits = SampleLimits(
            self.rollout_config.prompt_length, self.rollout_config.response_length
        )
        try:
            episode = await self._episode(source, sampling_params, limits)
            sample = program_sample(episode, limits, self._placeholder_id())
        except Exception as error:  # noqa: BLE001 - one broken sample must not sink the batch
            logger.exception("agent program %s failed on %s", source.program.name, source.env_id)
            sample = placeholder_sample(
                self._placeholder_id(), f"error: {type(error).__name__}", str(error)
            )
            episode = None
        return self._output(sample, episode)

    async def _episode(
        self, source: EpisodeSource, sampling_params: dict[str, Any], limits: SampleLimits
    ) -> Episode:
        assert source.program is not None and source.task is not None
        programs = worker_programs(
            self.server_manager, self.tokenizer, int(sampling_params.get("top_k", -1))
        )
        workflows = programs.workflows(source)
        sampling = SamplingParams(
            temperature=float(sampling_params["temperature"]),
            top_p=float(sampling_params["top_p"]),
            max_tokens=source.max_tokens_per_turn or limits.response_length,
        )
        [job] = program_jobs([dict(source.task)], [source.seed])
        episode = None
        for _ in range(source.program.retries + 1):
            episode = await ProgramWorkflow(workflows, sampling).run(job, uuid.uuid4().hex)
            if not episode.info.get("program_failure"):
                break
        assert episode is not None
        return episode

    def _placeholder_id(self) -> int:
        tokenizer = self.tokenizer
        token = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else None
        return int(token if token is not None else tokenizer.eos_token_id)

    def _output(self, sample: ProgramSample, episode: Episode | None) -> AgentLoopOutput:
        metrics = episode.metrics if episode is not None else {}
        return AgentLoopOutput(
            prompt_ids=sample.prompt_ids,
            response_ids=sample.response_ids,
            response_mask=sample.response_mask,
            response_logprobs=sample.response_logprobs,
            reward_score=sample.reward,
            num_turns=2 * sample.model_calls + 1,
            metrics={
                "generate_sequences": float(metrics.get("llm_time", 0.0)),
                # The program's own time between its model calls (its tools, its logic).
                "tool_calls": max(
                    0.0, float(metrics.get("program_time", 0.0)) - metrics.get("llm_time", 0.0)
                ),
                "compute_score": float(metrics.get("env_time", 0.0)),
            },
            extra_fields=sample.extra,
        )
