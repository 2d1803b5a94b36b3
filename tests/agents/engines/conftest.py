"""Real model servers for the engine tests (and any agent test that wants one)."""

from __future__ import annotations

import pytest

from tests.parts import require_part


@pytest.fixture(scope="session")
def llamacpp_server():
    """llama-cpp-python's OpenAI-compatible server serving the embedded SmolLM2 GGUF."""
    from rllm_agents.engines.llamacpp.server import LlamaCppServer, llamacpp_available

    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    with LlamaCppServer(n_ctx=2048) as server:
        yield server
