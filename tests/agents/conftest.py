"""Fixtures for the agent tests: real tokenizers (SmolLM2's, and a Qwen3-style template)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from rllm_agents.models import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def qwen_style_tokenizer(smollm2_tokenizer):
    """SmolLM2's vocabulary with a template that drops earlier <think> blocks."""
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    tokenizer.chat_template = (FIXTURES / "qwen_think.jinja").read_text()
    return tokenizer


@pytest.fixture(scope="session")
def tiny_engine():
    """The real local engine on the embedded tiny model (CPU)."""
    from rllm_agents.engines.local import LocalEngine

    engine = LocalEngine.from_name("tiny", max_batch_size=16)
    yield engine
    engine.close()


from tests.agents.engines.conftest import llamacpp_server  # noqa: E402, F401 - shared server
