"""The gateway in front of vLLM in-process (the embedded SmolLM2), driven by the openai client:
what a program sees is what vLLM sampled, token for token, and sessions do not cross."""

from __future__ import annotations

import asyncio

import pytest
from rllm_agents.chat.tito import render_prompt_ids
from rllm_agents.gateway import Gateway, build_sequences

from tests.agents.gateway.clients import client_for
from tests.parts import require_module

openai = require_module("openai", "the openai package (a dev dependency)")

pytestmark = pytest.mark.slow

SYSTEM = {"role": "system", "content": "You are terse."}


@pytest.fixture
async def vllm_gateway(vllm_engine):
    async with Gateway(vllm_engine) as gateway:
        yield gateway


async def test_a_chat_call_records_what_vllm_sampled(vllm_gateway, vllm_engine):
    session = vllm_gateway.open_session()
    messages = [SYSTEM, {"role": "user", "content": "Name a colour."}]
    async with client_for(session) as client:
        answer = await client.chat.completions.create(
            model="smollm2", messages=messages, max_tokens=8, seed=5, logprobs=True
        )
    choice = answer.choices[0]
    [call] = vllm_gateway.close_session(session.id)
    assert call.prompt_ids == render_prompt_ids(vllm_engine.tokenizer, messages)
    assert call.completion_ids == choice.model_extra["token_ids"]
    assert call.text == choice.message.content
    assert [entry.logprob for entry in choice.logprobs.content] == call.logprobs
    assert len(call.logprobs) == len(call.completion_ids) == answer.usage.completion_tokens


async def test_concurrent_sessions_keep_their_own_turns(vllm_gateway):
    sessions = [vllm_gateway.open_session() for _ in range(16)]

    async def program(number: int, session) -> None:
        messages = [SYSTEM, {"role": "user", "content": f"Session {number} says hello."}]
        async with client_for(session) as client:
            for _ in range(2):
                answer = await client.chat.completions.create(
                    model="smollm2", messages=messages, max_tokens=4
                )
                messages += [
                    {"role": "assistant", "content": answer.choices[0].message.content},
                    {"role": "user", "content": f"Session {number} again."},
                ]

    await asyncio.gather(*(program(n, s) for n, s in enumerate(sessions)))
    for number, session in enumerate(sessions):
        calls = vllm_gateway.close_session(session.id)
        assert len(calls) == 2
        assert all(call.messages[1]["content"] == f"Session {number} says hello." for call in calls)
        sequences, _ = build_sequences(calls)
        assert sequences, "the session's calls make training sequences"
