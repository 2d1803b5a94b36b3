"""The native trainer's episodes from an agent program: the sampler seam, with a gateway.

:class:`ProgramSampler` is an :class:`~rllm_train.native.sampler.EpisodeSampler` for runs with
``program.function`` or ``program.command``: each call runs the program once per task row through
:class:`~rllm_agents.programs.ProgramExecutionEngine`, whose gateway serves a ``LocalEngine`` on
the very model being trained (no copy: every step samples from the latest weights) and records
each call's prompt and completion token ids. The trainer gets ordinary Episodes back - one
trajectory per token sequence the calls formed, with ``response_mask`` 1 on the tokens the model
generated and the episode's reward - and trains them as it trains any agent's: the ``n`` samples
of a task form its GRPO group, failed runs (crashed, timed out, bad output, no model call) are
left out of the update. The program itself is loaded and checked with the run's setup
(:func:`rllm_train.run.specs.program_for_run`).

The step's temperature (and ``rollout.top_p``, ``rollout.max_response_tokens`` per call) are
the session defaults: a program that sets its own values in its requests keeps them. Calls are
not seeded, so a program run is not reproducible bit for bit (``rollout.dispatch`` does not
apply: a program's calls reach the engine whenever the program makes them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rllm_agents.programs import AgentProgram, ProgramExecutionEngine

from rllm_train.native.sampler import (
    PolicyServing,
    Rollout,
    RolloutLimits,
    ServingSampler,
    timed_rollout,
)


class ProgramSampler(ServingSampler):
    """Episodes of an agent program on the trained model (see the module docstring)."""

    def __init__(
        self,
        serving: PolicyServing,
        program: AgentProgram,
        env_factory: Callable[[], Any],
        limits: RolloutLimits,
        *,
        timeout: float | None,
        retries: int,
    ) -> None:
        super().__init__(serving, env_factory, limits)
        self.program = program
        self.timeout = timeout
        self.retries = retries

    def sample(
        self,
        seeds: Sequence[int],
        temperature: float,
        sampling_seed: int | None,
        tasks: Sequence[dict[str, Any]] | None = None,
    ) -> Rollout:
        if tasks is None:
            raise ValueError("an agent program plays task rows, and this call has none")
        self.serve()
        runner = ProgramExecutionEngine(
            self.program,
            self.engine,
            env_factory=self.env_factory,
            tokenizer=self.tokenizer,
            n_parallel=len(seeds),
            retry_limit=self.retries,
            timeout=self.timeout,
            sampling=self.limits.sampling(temperature),
            progress=False,
        )
        return timed_rollout([self.engine], lambda: runner.run(list(tasks), list(seeds)))
