"""`AgentWorkflowEngine`: retries, timeouts and ordering, with the real local engine."""

from __future__ import annotations

import asyncio

from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution import AgentWorkflowEngine, SingleTurnWorkflow, Workflow
from rllm_agents.types import Episode, TerminationReason


def ask(task):
    return [{"role": "user", "content": task["question"]}]


def replied(task, reply):
    return 1.0 if reply.strip() else 0.0


def test_single_turn_workflow_on_the_tiny_model(tiny_engine, tmp_path):
    tasks = [{"question": f"Say {word}.", "id": word} for word in ("yes", "no", "maybe")]
    engine = AgentWorkflowEngine(
        lambda: SingleTurnWorkflow(tiny_engine, ask, replied, SamplingParams(max_tokens=5)),
        n_parallel=3,
        output_path=tmp_path / "episodes.jsonl",
        progress=False,
    )
    episodes = engine.run(tasks)
    assert [e.task["id"] for e in episodes] == ["yes", "no", "maybe"]
    for episode in episodes:
        step = episode.trajectories[0].steps[0]
        assert 1 <= len(step.response_ids) <= 5 and len(step.logprobs) == len(step.response_ids)
        assert episode.reward == (1.0 if step.model_response.strip() else 0.0)
        assert episode.metrics["attempts"] == 1
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 3


class FlakyWorkflow(Workflow):
    """Fails its first `failures` attempts per task (counted in a shared dict), then succeeds."""

    def __init__(self, attempts: dict, failures: int, hang: bool = False) -> None:
        super().__init__(engine=None)
        self.attempts, self.failures, self.hang = attempts, failures, hang

    async def run(self, task, uid):
        seen = self.attempts[uid] = self.attempts.get(uid, 0) + 1
        if seen <= self.failures:
            if self.hang:
                await asyncio.sleep(30)
            raise ConnectionError(f"attempt {seen} failed")
        return Episode(id=uid, task=task, termination_reason=TerminationReason.ENV_DONE)


def test_failed_attempts_are_retried_then_recorded():
    attempts: dict = {}
    engine = AgentWorkflowEngine(lambda: FlakyWorkflow(attempts, 2), retry_limit=2, progress=False)
    (episode,) = engine.run([{"id": "t"}])
    assert episode.termination_reason == TerminationReason.ENV_DONE
    assert episode.metrics["attempts"] == 3
    assert episode.info["attempt_errors"] == [
        "ConnectionError: attempt 1 failed",
        "ConnectionError: attempt 2 failed",
    ]

    attempts.clear()
    engine = AgentWorkflowEngine(lambda: FlakyWorkflow(attempts, 5), retry_limit=1, progress=False)
    episodes = engine.run([{"id": "a"}, {"id": "b"}])
    assert [e.termination_reason for e in episodes] == [TerminationReason.ERROR] * 2
    assert all(e.metrics["attempts"] == 2 for e in episodes)
    assert engine.last_metrics["retries"] == 2


def test_hung_attempt_times_out_and_is_retried():
    attempts: dict = {}
    engine = AgentWorkflowEngine(
        lambda: FlakyWorkflow(attempts, 1, hang=True), retry_limit=1, timeout=0.2, progress=False
    )
    (episode,) = engine.run([{"id": "t"}])
    assert episode.termination_reason == TerminationReason.ENV_DONE
    assert "timeout" in episode.info["attempt_errors"][0]
