"""Prompt log-probs (rllm_agents.engines.scoring) from vLLM's OpenAI server through the OpenAI
client, both asks (the prompt's echo and vLLM's prompt_logprobs field), held to the float32
transformers model (scored_sequences.VLLM_PROMPT_TOLERANCE by the dtype vLLM computes in); and
the in-process engine's refusal where its CPU build would die (LoRA enabled). The in-process
engine without LoRA scores a distillation teacher: tests/train/test_distill_served.py.

The engines are the group's (tests/agents/conftest.py), started once for every vLLM test.
"""

from __future__ import annotations

import asyncio

import pytest
from rllm_agents.engines.base import ContextOverflow, EngineError, SamplingParams
from rllm_agents.engines.openai import OpenAIEngine

from tests.agents.engines.scored_sequences import (
    SCORED_FROM,
    VLLM_PROMPT_TOLERANCE,
    gaps,
    reference_logprobs,
    scored_sequences,
)

pytestmark = pytest.mark.slow

TWO_TOKENS = SamplingParams(max_tokens=2)


@pytest.fixture(scope="module")
def sequences(smollm2_reference):
    model, tokenizer = smollm2_reference
    sequences = scored_sequences(tokenizer)
    return sequences, [reference_logprobs(model, ids, SCORED_FROM) for ids in sequences]


def assert_close(answers, references, dtype: str) -> None:
    measured = [gaps(a, r) for a, r in zip(answers, references, strict=True)]
    largest, mean = max(m[0] for m in measured), max(m[1] for m in measured)
    print(f"\nvLLM ({dtype}) against transformers: largest {largest:.3g}, mean {mean:.3g}")
    assert largest <= VLLM_PROMPT_TOLERANCE[dtype][0] and mean <= VLLM_PROMPT_TOLERANCE[dtype][1]
    assert sum(m[2] for m in measured) == 0  # a value for every token, any ids


async def test_vllm_on_a_cpu_with_lora_refuses_to_score(vllm_engine, sequences):
    ids, references = sequences
    if not vllm_engine.settings.on_cpu:  # a GPU's LoRA kernels take every prompt row
        answers = [await vllm_engine.prompt_logprobs(s, SCORED_FROM) for s in ids]
        assert_close(answers, references, vllm_engine.dtype)
        return
    with pytest.raises(EngineError, match="cannot score prompts with LoRA enabled"):
        await vllm_engine.prompt_logprobs(ids[0], SCORED_FROM)
    # The request never reached the engine core, which serves on.
    after = await vllm_engine.generate(prompt_ids=ids[0][:SCORED_FROM], sampling=TWO_TOKENS)
    assert after.completion_ids


async def test_vllms_server_answers_both_asks(vllm_server_engine, sequences):
    ids, references = sequences
    engine = vllm_server_engine
    echoed = await asyncio.gather(*(engine.prompt_logprobs(s, SCORED_FROM) for s in ids))
    assert_close(echoed, references, engine.dtype)
    # A prompt the server refuses (too long: its answer names "the prompt") is that request's
    # fault; the engine goes on sending token ids, which score any sequence.
    with pytest.raises(ContextOverflow):
        await engine.generate(prompt_ids=[5] * 9000, sampling=TWO_TOKENS)
    again = await engine.prompt_logprobs(ids[-1], SCORED_FROM)
    assert again == pytest.approx(echoed[-1], abs=1e-5)
    # The same server asked through vLLM's own field reads the same numbers.
    client = OpenAIEngine(engine.server.base_url, engine.server.served_name, max_retries=0)
    client._scoring_ask = 1  # the second ask: prompt_logprobs (a server without echo)
    try:
        fielded = await asyncio.gather(*(client.prompt_logprobs(s, SCORED_FROM) for s in ids))
    finally:
        await client.aclose()
    for by_echo, by_field in zip(echoed, fielded, strict=True):
        assert by_field == pytest.approx(by_echo, abs=1e-5)
