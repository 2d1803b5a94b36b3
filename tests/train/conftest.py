"""Fixtures of the trainer tests: the tiny random model every native run uses."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """The model name (or local path) the trainer tests train: rllm-agents' seeded "tiny"."""
    override = os.environ.get("RLLM_TEST_TINY_MODEL")  # a local copy, to work offline on it
    if override:
        return override
    from rllm_agents.models import resolve_model

    return str(resolve_model("tiny"))


def run_overrides(output, model: str, **changes) -> dict:
    """A fast native run: few tasks, short replies, no progress bar."""
    overrides = {
        "model.name": model,
        "trainer.output": str(output),
        "trainer.progress": False,
        "trainer.steps": 2,
        "trainer.save_every": 0,
        "rollout.tasks_per_step": 2,
        "rollout.n": 2,
        "rollout.max_response_tokens": 6,
        "trainer.lr": 1e-3,
        "trainer.validate_held_out": False,  # the tests that want it turn it on
    }
    overrides.update(changes)
    return overrides
