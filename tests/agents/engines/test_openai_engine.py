"""OpenAIEngine against real servers: a misbehaving loopback server and llama.cpp."""

from __future__ import annotations

import asyncio
import time

import pytest
from rllm_agents.engines.base import EngineError, SamplingParams
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.testing.fault_server import FaultServer

MESSAGES = [{"role": "user", "content": "Which way?"}]
QUICK_BACKOFF = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}


def _engine(server, **kwargs):
    return OpenAIEngine(server.base_url, "canned", **{**QUICK_BACKOFF, **kwargs})


@pytest.mark.parametrize("fault", ["500", "429", "drop", "garbage"])
async def test_transient_faults_are_retried(fault):
    with FaultServer(script=[fault, fault], completion="Left") as server:
        engine = _engine(server, max_retries=3)
        out = await engine.generate(MESSAGES)
        await engine.aclose()
    assert out.text == "Left"
    assert server.stats.requests == 3 and server.stats.served[fault] == 2


async def test_stalled_request_times_out_and_is_retried():
    with FaultServer(script=["stall"], stall_s=5, completion="Right") as server:
        engine = _engine(server, timeout=0.3, max_retries=2)
        started = time.monotonic()
        out = await engine.generate(MESSAGES)
        await engine.aclose()
    assert out.text == "Right"
    assert time.monotonic() - started < 3, "the stall must be cut by the client timeout"


async def test_last_failure_is_a_clear_engine_error():
    with FaultServer(script=["500"], cycle=True) as server:
        engine = _engine(server, max_retries=2)
        with pytest.raises(EngineError, match=r"after 3 attempts: HTTP 500"):
            await engine.generate(MESSAGES)
        await engine.aclose()
    assert server.stats.requests == 3


async def test_unreachable_server_is_a_clear_engine_error():
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "none", max_retries=1, **QUICK_BACKOFF)
    with pytest.raises(EngineError, match="connection error"):
        await engine.generate(MESSAGES)
    await engine.aclose()


async def test_not_found_is_not_retried():
    with FaultServer() as server:
        engine = OpenAIEngine(f"http://127.0.0.1:{server.port}/wrong", "x", **QUICK_BACKOFF)
        with pytest.raises(EngineError, match="HTTP 404"):
            await engine.generate(MESSAGES)
        await engine.aclose()
    assert server.stats.requests == 0


async def test_backoff_grows_exponentially_with_full_jitter():
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "x", backoff_base_s=1, backoff_max_s=8, seed=0)
    delays = [[engine._backoff_s(attempt, None) for _ in range(200)] for attempt in range(5)]
    ceilings = [1, 2, 4, 8, 8]
    for samples, ceiling in zip(delays, ceilings, strict=True):
        assert 0 <= min(samples) and max(samples) <= ceiling
        assert max(samples) > 0.8 * ceiling  # jitter spans the whole window
    assert engine._backoff_s(0, retry_after=3.0) >= 3.0  # Retry-After is honoured
    await engine.aclose()


async def test_sampling_parameters_reach_the_server():
    with FaultServer(record_bodies=True) as server:
        engine = _engine(server)
        sampling = SamplingParams(temperature=0.3, top_p=0.8, max_tokens=7, stop=("\n",), seed=4)
        await engine.generate(MESSAGES, sampling=sampling)
        await engine.aclose()
    body = server.stats.bodies[0]
    assert body["messages"] == MESSAGES and body["model"] == "canned"
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.3, 0.8, 7)
    assert body["stop"] == ["\n"] and body["seed"] == 4 and body["logprobs"] is True


async def test_many_concurrent_requests_are_served_concurrently():
    with FaultServer(latency_s=0.5, completion="Up") as server:
        engine = _engine(server)
        started = time.monotonic()
        outs = await asyncio.gather(*[engine.generate(MESSAGES) for _ in range(100)])
        elapsed = time.monotonic() - started
        await engine.aclose()
    assert [o.text for o in outs] == ["Up"] * 100
    assert server.stats.max_in_flight == 100
    assert elapsed < 3, f"100 requests of 0.5 s took {elapsed:.1f}s: they were serialised"


# ---- the real llama.cpp server with the embedded SmolLM2 -----------------------------------


async def test_llamacpp_chat_answers(llamacpp_server, smollm2_tokenizer):
    engine = OpenAIEngine(llamacpp_server.base_url, "smollm2", tokenizer=smollm2_tokenizer)
    out = await engine.generate(
        [{"role": "user", "content": "What is 2+3?"}],
        sampling=SamplingParams(temperature=0.0, max_tokens=24),
    )
    await engine.aclose()
    assert "5" in out.text
    assert out.finish_reason == "stop"
    assert out.completion_ids[-1] == smollm2_tokenizer.eos_token_id
    assert smollm2_tokenizer.decode(out.completion_ids[:-1]) == out.text


async def test_llamacpp_token_prompts_fall_back_to_text(llamacpp_server, smollm2_tokenizer):
    engine = OpenAIEngine(llamacpp_server.base_url, "smollm2", tokenizer=smollm2_tokenizer)
    prompt = smollm2_tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, tokenize=False
    )
    ids = smollm2_tokenizer.encode(prompt, add_special_tokens=False)
    out = await engine.generate(
        prompt_ids=ids, sampling=SamplingParams(temperature=0.0, max_tokens=6)
    )
    await engine.aclose()
    assert engine.token_prompts_supported is False  # llama.cpp takes only text prompts
    assert out.prompt_ids == ids
    assert out.finish_reason == "length"
    assert len(out.completion_ids) == len(out.logprobs) == 6
    assert all(lp <= 0 for lp in out.logprobs)
    assert "2" in out.text or "5" in out.text


async def test_token_prompts_without_tokenizer_explain_the_fix(llamacpp_server):
    engine = OpenAIEngine(llamacpp_server.base_url, "smollm2", max_retries=0)
    with pytest.raises(EngineError, match="pass tokenizer="):
        await engine.generate(prompt_ids=[1, 2, 3], sampling=SamplingParams(max_tokens=2))
    await engine.aclose()
