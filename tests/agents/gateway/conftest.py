"""Fixtures for the gateway tests: gateways in front of real engines, the real openai client."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from rllm_agents.gateway import Gateway

HERE = Path(__file__).parent


@pytest.fixture
async def tiny_gateway(tiny_engine):
    """The gateway in front of the local engine on the embedded tiny model."""
    async with Gateway(tiny_engine) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def think_dropping_engine():
    """The tiny model behind a template that drops earlier turns' <think> blocks."""
    from rllm_agents.engines.local import LocalEngine
    from rllm_agents.models import load_tokenizer, resolve_model

    tokenizer = copy.deepcopy(load_tokenizer("tiny"))
    tokenizer.chat_template = (HERE / "think_dropping.jinja").read_text()
    engine = LocalEngine(resolve_model("tiny"), tokenizer, max_batch_size=4)
    yield engine
    engine.close()
