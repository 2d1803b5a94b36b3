"""verl's agent-loop manager, with the run's failure rule (``trainer.max_failure_rate``) and
what each rollout replica served.

verl's trainer asks its ``AgentLoopManager`` for each step's batch; this subclass (named in
``actor_rollout_ref.rollout.agent.agent_loop_manager_class``) counts the batch's failed
episodes - the ``rllm_failure`` / ``rllm_error`` each agent loop reports - and stops the run
with :class:`~rllm_train.run.failures.TooManyFailedEpisodes` when they are above the limit:
the same rule, through the same function, as the native trainer's. Validation batches are not
checked (native does not check them either). verl's synchronous and one-step-off trainers
take the manager from that setting; the fully-asynchronous one builds its own, so there the
rule does not apply.

This module imports verl: only verl's trainer loads it (by its import path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.utils.ray_utils import auto_await

from rllm_train.run.failures import StepFailures, check_failure_rate, step_failures

MAX_FAILURE_RATE_KEY = "rllm.max_failure_rate"  # where the composed verl config carries it


def batch_failures(non_tensor_batch: Mapping[str, Any]) -> StepFailures:
    """The failed episodes of a batch the agent loops produced (their extra fields)."""
    count = len(next(iter(non_tensor_batch.values()))) if non_tensor_batch else 0
    failures = non_tensor_batch.get("rllm_failure", [None] * count)
    errors = non_tensor_batch.get("rllm_error", [None] * count)
    return step_failures(zip(failures, errors, strict=True))


def check_batch(output: Any, prompts_meta: Mapping[str, Any], max_rate: float) -> None:
    """The failure rule on one generated training batch (validation batches pass)."""
    if prompts_meta.get("validate", False):
        return
    step = int(prompts_meta.get("global_steps", 0) or 0)
    check_failure_rate(batch_failures(output.non_tensor_batch), max_rate, step)


REPLICA_METRIC_PREFIX = "rollout/replica_"


def replica_metrics(non_tensor_batch: Mapping[str, Any]) -> dict[str, float]:
    """Per replica: the turns it served and the oldest weights version it served them with."""
    turns: dict[int, int] = {}
    oldest: dict[int, int] = {}
    for served_by in non_tensor_batch.get("rllm_served_by", ()):
        for replica, version in served_by or ():
            turns[replica] = turns.get(replica, 0) + 1
            oldest[replica] = min(oldest.get(replica, version), version)
    metrics: dict[str, float] = {}
    for replica in sorted(turns):
        metrics[f"{REPLICA_METRIC_PREFIX}turns/{replica}"] = float(turns[replica])
        metrics[f"{REPLICA_METRIC_PREFIX}weights/{replica}"] = float(oldest[replica])
    return metrics


class RllmAgentLoopManager(AgentLoopManager):
    """verl's manager, checking each training batch against ``trainer.max_failure_rate`` and
    adding the replicas' figures to the step's metrics."""

    @auto_await
    async def generate_sequences(self, prompts):
        output = await super().generate_sequences(prompts)
        from omegaconf import OmegaConf

        max_rate = OmegaConf.select(self.config, MAX_FAILURE_RATE_KEY, default=1.0)
        check_batch(output, prompts.meta_info, float(max_rate))
        # verl's trainer logs the manager's timing dict, each key under "timing_s/".
        output.meta_info.setdefault("timing", {}).update(replica_metrics(output.non_tensor_batch))
        return output
