"""Agent programs as workflows: one gateway session per episode, run by ``AgentWorkflowEngine``.

An episode of a program, :class:`ProgramWorkflow`:

1. open a session on the gateway (:mod:`rllm_agents.gateway`) in front of the rollout engine;
2. run the program on the task row with the session's endpoint, within the time limit;
3. close the session, taking every call it recorded;
4. turn the calls into token-exact trajectories (``build_sequences``: merged where each
   prompt extends the last, split where the program or the chat template rewrote history);
5. score it: the program's ``reward``, or its ``answer`` graded by the env
   (:mod:`rllm_agents.programs.grading`); every trajectory carries that reward.

The session is closed however the run ends (a failure, the time limit, cancellation), and a
failed run is an Episode too: ``termination_reason`` from
:data:`~rllm_agents.programs.result.FAILURE_ENDINGS`, ``info["program_failure"]`` its kind,
``info["program_stderr"]`` the end of what the program wrote there, ``error`` one line of why,
and the calls made before it failed as its trajectories (reward 0).

:class:`ProgramWorkflows` is the engine's workflow factory: it starts the gateway on the run's
event loop with the first episode and stops it (and the grader's envs) when the engine closes
it at the end of the run. :class:`ProgramExecutionEngine` puts it all behind the
``execute_tasks(tasks, seeds)`` call of :class:`~rllm_agents.execution.AgentExecutionEngine`,
with the same concurrency, per-attempt retries, output file and run metrics.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution.workflow import AgentWorkflowEngine, Workflow
from rllm_agents.programs.grading import EnvGrader, Grade
from rllm_agents.programs.result import ProgramFailure
from rllm_agents.programs.spec import AgentProgram, Endpoint, ProgramOutput, function_program
from rllm_agents.types import Episode, TerminationReason, Trajectory

# A failed program run is tried once more (a crash may be a one-off), then recorded.
DEFAULT_RETRIES = 1


def program_jobs(
    tasks: Sequence[dict[str, Any]], seeds: Sequence[int | None] | None = None
) -> list[dict[str, Any]]:
    """The workflow engine's tasks: each row with its seed (the env's reset seed when it grades)
    and the id that groups a task's samples."""
    seeds = list(seeds) if seeds is not None else [None] * len(tasks)
    if len(seeds) != len(tasks):
        raise ValueError(f"{len(seeds)} seeds for {len(tasks)} tasks")
    return [
        {"id": str(task.get("task_id", task.get("id", index))), "task": dict(task), "seed": seed}
        for index, (task, seed) in enumerate(zip(tasks, seeds, strict=True))
    ]


def failure_counts(episodes: Sequence[Episode]) -> dict[str, int]:
    """How many program runs failed, by kind (crashed, timeout, bad_output, ...)."""
    kinds = Counter(episode.info.get("program_failure") for episode in episodes)
    kinds.pop(None, None)
    return dict(sorted(kinds.items()))


class ProgramWorkflows:
    """The workflow factory of a program run: the gateway, the grader and the settings."""

    def __init__(
        self,
        program: AgentProgram,
        engine: Any,
        *,
        tokenizer: Any = None,
        grader: EnvGrader | None = None,
        timeout_s: float | None = None,
        sampling: SamplingParams | None = None,
        host: str = "127.0.0.1",
        gateway_processes: int = 0,
    ) -> None:
        self.program = program
        self.engine = engine
        self.tokenizer = tokenizer
        self.grader = grader
        self.timeout_s = timeout_s
        # What a program's calls leave unset (OpenAI field names).
        self.sampling_defaults = sampling.request_fields() if sampling is not None else {}
        self.host = host
        # 0: the gateway serves from this process; N: from N processes (GatewayProcesses).
        self.gateway_processes = gateway_processes
        self._gateway: asyncio.Future[Any] | None = None

    def __call__(self) -> ProgramWorkflow:
        return ProgramWorkflow(self)

    async def gateway(self) -> Any:
        """The run's gateway, started by the first episode that asks (on the run's loop)."""
        if self._gateway is None:
            self._gateway = asyncio.ensure_future(self._start_gateway())
        return await asyncio.shield(self._gateway)

    async def _start_gateway(self) -> Any:
        from rllm_agents.gateway import Gateway, GatewayProcesses

        if self.gateway_processes:
            gateway = GatewayProcesses(
                self.engine, processes=self.gateway_processes, host=self.host
            )
        else:
            gateway = Gateway(self.engine, host=self.host, port=0)
        await gateway.start()
        return gateway

    async def aclose(self) -> None:
        """Stop the gateway and close the grader's envs (the workflow engine calls this at the
        end of each run; the next run starts them again)."""
        started, self._gateway = self._gateway, None
        try:
            if started is not None and not (started.done() and started.exception()):
                gateway = await started
                await gateway.stop()
            # A gateway that failed to start has nothing to stop, and every episode of the
            # run has already recorded why.
        finally:
            if self.grader is not None:
                await self.grader.aclose()


class ProgramWorkflow(Workflow):
    """One episode of an agent program (see the module docstring)."""

    def __init__(self, workflows: ProgramWorkflows, sampling: SamplingParams | None = None) -> None:
        super().__init__(workflows.engine, sampling)
        self.workflows = workflows
        # This episode's own defaults (e.g. a validation pass's temperature), else the run's.
        self.sampling_defaults = (
            sampling.request_fields() if sampling is not None else workflows.sampling_defaults
        )

    async def run(self, task: dict[str, Any], uid: str) -> Episode:
        workflows = self.workflows
        row, seed = task["task"], task.get("seed")
        gateway = await workflows.gateway()
        session = gateway.open_session(
            session_id=uuid.uuid4().hex, sampling_defaults=self.sampling_defaults
        )
        endpoint = Endpoint(session.base_url, session.api_key, gateway.model_name, session.id)
        output: ProgramOutput | None = None
        failure: ProgramFailure | None = None
        try:
            output = await workflows.program.run(row, endpoint, workflows.timeout_s)
        except ProgramFailure as error:
            failure = error
        finally:
            calls = await gateway.aclose_session(session.id)  # also when cancelled
        grade: Grade | None = None
        if failure is None and not calls:
            failure = ProgramFailure(
                "no_model_calls",
                f"{workflows.program.name} made no model call through the gateway; it must "
                "send its requests to the base URL it was given (OPENAI_BASE_URL)",
                output.stderr if output else "",
            )
        if failure is None and output is not None and output.result.reward is None:
            if workflows.grader is None:
                failure = ProgramFailure(
                    "no_grader", "the program gave an answer but no reward, and no env grades it"
                )
            else:
                grade = await workflows.grader.grade(row, output.result.answer or "", seed)
        trajectories, report = _sequences(calls, workflows.tokenizer)
        # Calls the gateway answered with an error (a malformed request, a prompt too long):
        # recorded nowhere else, and often why a program crashed.
        report["failed_calls"] = session.failed_calls
        return program_episode(
            uid=uid,
            job=task,
            calls=calls,
            trajectories=trajectories,
            report=report,
            output=output,
            failure=failure,
            grade=grade,
        )


def program_episode(
    *,
    uid: str,
    job: dict[str, Any],
    calls: list[Any],
    trajectories: list[Trajectory],
    report: dict[str, Any],
    output: ProgramOutput | None,
    failure: ProgramFailure | None,
    grade: Grade | None,
) -> Episode:
    """The Episode of one program run, from what the run produced (pure)."""
    row = job["task"]
    info: dict[str, Any] = {"task_key": job["id"], "seed": job.get("seed"), "sequences": report}
    metrics = {
        "turns": float(len(calls)),
        "llm_time": sum(float(call.latency_s) for call in calls),
        "prompt_tokens": float(sum(len(call.prompt_ids) for call in calls)),
        "completion_tokens": float(sum(len(call.completion_ids) for call in calls)),
        "env_time": grade.seconds if grade is not None else 0.0,
        "program_time": output.seconds if output is not None else 0.0,
    }
    reward, is_correct, env_failure, error = 0.0, None, None, None
    if failure is not None:
        reason = failure.ending
        error = f"{failure.kind}: {failure}"
        info["program_failure"] = failure.kind
        info["program_stderr"] = failure.stderr
    else:
        assert output is not None
        result = output.result
        info["program_info"] = result.info
        if result.answer is not None:
            info["answer"] = result.answer
        if grade is not None:
            reward, is_correct, env_failure = grade.reward, grade.is_correct, grade.failure
            info["grade"] = grade.info
        else:
            reward = float(result.reward or 0.0)
            correct = result.info.get("is_correct")
            is_correct = correct if isinstance(correct, bool) else None
        reason = TerminationReason.ENV_FAILURE if env_failure else TerminationReason.ENV_DONE
        if not trajectories:
            # Calls without token ids (a served model, no tokenizer) form no sequence to train
            # on, but the episode's score still needs a trajectory to be read from.
            trajectories = [Trajectory(info={"untokenized_calls": len(calls)})]
    for trajectory in trajectories:
        trajectory.task = row
        trajectory.reward = reward
    return Episode(
        id=uid,
        task=row,
        termination_reason=reason,
        trajectories=trajectories,
        is_correct=is_correct,
        failure=env_failure,
        error=error,
        metrics=metrics,
        info=info,
    )


def _sequences(calls: list[Any], tokenizer: Any) -> tuple[list[Trajectory], dict[str, Any]]:
    if not calls:
        return [], {}
    from rllm_agents.gateway import build_sequences

    trajectories, report = build_sequences(calls, tokenizer=tokenizer)
    return list(trajectories), report.to_dict()


class ProgramExecutionEngine:
    """Runs an agent program over task rows, one Episode per row, in order.

    The program's counterpart of :class:`~rllm_agents.execution.AgentExecutionEngine`:
    ``engine`` is any rollout engine (served through the gateway), ``env_factory`` the env
    that grades answers (None: the program must return rewards), ``tokenizer`` the engine's
    (for token-exact sequences), ``timeout`` the seconds one run of the program may take,
    ``retry_limit`` how often a failed run is tried again, ``sampling`` the defaults a
    program's calls get for what they leave unset.
    """

    def __init__(
        self,
        program: AgentProgram | str | Callable[..., Any],
        engine: Any,
        *,
        env_factory: Callable[[], Any] | None = None,
        tokenizer: Any = None,
        n_parallel: int = 8,
        retry_limit: int = DEFAULT_RETRIES,
        timeout: float | None = None,
        sampling: SamplingParams | None = None,
        output_path: str | Path | None = None,
        output_append: bool = False,
        progress: bool | None = None,
        gateway_processes: int = 0,
    ) -> None:
        if isinstance(program, str) or not hasattr(program, "run"):
            program = function_program(program)
        self.workflows = ProgramWorkflows(
            program,
            engine,
            tokenizer=tokenizer,
            grader=EnvGrader(env_factory) if env_factory is not None else None,
            timeout_s=timeout,
            sampling=sampling,
            gateway_processes=gateway_processes,
        )
        # The program's own time limit ends a run (keeping its stderr and calls); the
        # workflow engine adds none of its own.
        self.runner = AgentWorkflowEngine(
            self.workflows,
            n_parallel=n_parallel,
            retry_limit=retry_limit,
            output_path=output_path,
            output_append=output_append,
            progress=progress,
        )

    @property
    def last_metrics(self) -> dict[str, Any]:
        """The last run's summary, with the rates an agent's run reports."""
        metrics = dict(self.runner.last_metrics)
        wall = metrics.get("wall_time") or 0.0
        if wall > 0:
            metrics["episodes_per_s"] = metrics["episodes"] / wall
            metrics["completion_tokens_per_s"] = metrics["completion_tokens"] / wall
        return metrics

    async def execute_tasks(
        self, tasks: Sequence[dict[str, Any]], seeds: Sequence[int | None] | None = None
    ) -> list[Episode]:
        jobs = program_jobs([dict(task) for task in tasks], seeds)
        return await self.runner.execute_tasks(jobs, [job["id"] for job in jobs])

    def run(
        self, tasks: Sequence[dict[str, Any]], seeds: Sequence[int | None] | None = None
    ) -> list[Episode]:
        return asyncio.run(self.execute_tasks(tasks, seeds))

    def close(self) -> None:
        self.runner.close()
