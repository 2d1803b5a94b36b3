"""The gateway in front of llama.cpp's server (the embedded SmolLM2), driven by the openai client.

The engine is the project's OpenAIEngine rendering prompts with SmolLM2's tokenizer; the
gateway renders chat messages with the same tokenizer and hands the engine token ids, so the
recorded prompt ids are the engine's own and the completion ids are what the engine reports.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from rllm_agents.chat.tito import encode, render_prompt_ids
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.gateway import Gateway, build_sequences

from tests.agents.gateway.clients import client_for
from tests.parts import require_module

openai = require_module("openai", "the openai package (a dev dependency)")

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
SYSTEM = (
    "You call tools. To call a tool, answer with exactly one line of the form "
    '<tool_call>{"name": "add", "arguments": {"a": A, "b": B}}</tool_call> and nothing else.'
)


def few_shot(question: tuple[int, int]) -> list[dict]:
    """SmolLM2's template does not render tools, so examples teach the call format."""
    messages = [{"role": "system", "content": SYSTEM}]
    for a, b in [(1, 2), (7, 5), (10, 4)]:
        call = json.dumps({"name": "add", "arguments": {"a": a, "b": b}})
        messages.append({"role": "user", "content": f"What is {a} + {b}?"})
        messages.append({"role": "assistant", "content": f"<tool_call>{call}</tool_call>"})
    messages.append({"role": "user", "content": f"What is {question[0]} + {question[1]}?"})
    return messages


@pytest.fixture
async def llama_gateway(llamacpp_server, smollm2_tokenizer):
    engine = OpenAIEngine(
        llamacpp_server.base_url,
        llamacpp_server.model_alias,
        use_completions=True,
        tokenizer=smollm2_tokenizer,
        max_retries=1,
    )
    try:
        async with Gateway(engine) as gateway:
            yield gateway
    finally:
        await engine.aclose()


async def test_tool_calls_come_back_parsed_and_recorded(llama_gateway, smollm2_tokenizer):
    session = llama_gateway.open_session()
    messages = few_shot((3, 4))
    async with client_for(session) as client:
        answer = await client.chat.completions.create(
            model="smollm2", messages=messages, tools=[ADD_TOOL], max_tokens=40, temperature=0
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        [tool_call] = choice.message.tool_calls
        assert tool_call.function.name == "add" and tool_call.id.startswith("call_")
        assert json.loads(tool_call.function.arguments) == {"a": 3, "b": 4}
        # The program answers the call as OpenAI programs do; the gateway serves the next turn.
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [tool_call.model_dump()]},
            {"role": "tool", "tool_call_id": tool_call.id, "content": "7"},
        ]
        await client.chat.completions.create(
            model="smollm2", messages=messages, tools=[ADD_TOOL], max_tokens=2, temperature=0
        )
    first, second = llama_gateway.close_session(session.id)
    assert first.prompt_ids == render_prompt_ids(smollm2_tokenizer, few_shot((3, 4)), [ADD_TOOL])
    assert first.prompt_ids == choice.model_extra["prompt_token_ids"]
    assert first.completion_ids == choice.model_extra["token_ids"]
    # llama.cpp returns text; the engine's ids are that text re-tokenised, with the EOS it
    # stopped on.
    assert first.completion_ids == [
        *encode(smollm2_tokenizer, first.text),
        smollm2_tokenizer.eos_token_id,
    ]
    assert first.tool_calls[0]["function"]["name"] == "add"
    assert second.messages[-1] == {"role": "tool", "tool_call_id": tool_call.id, "content": "7"}
    # SmolLM2's template renders an assistant turn's content only, not its tool calls: the
    # second prompt does not hold the tokens the model wrote, and the report says so.
    sequences, report = build_sequences([first, second])
    assert len(sequences) == 2 and [note.reason for note in report.splits] == ["template"]


async def test_streamed_n_choices_match_the_recording(llama_gateway):
    session = llama_gateway.open_session()
    messages = [{"role": "user", "content": "Say a number."}]
    async with client_for(session) as client:
        stream = await client.chat.completions.create(
            model="smollm2",
            messages=messages,
            n=2,
            max_tokens=5,
            seed=1,
            stream=True,
            stream_options={"include_usage": True},
        )
        texts, usage = {0: "", 1: ""}, None
        async for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                texts[choice.index] += choice.delta.content or ""
    calls = llama_gateway.close_session(session.id)
    assert [call.choice_index for call in calls] == [0, 1]
    assert [call.sampling["seed"] for call in calls] == [1, 2]
    assert [texts[0], texts[1]] == [call.text for call in calls]
    assert usage.completion_tokens == sum(len(call.completion_ids) for call in calls)
    assert usage.prompt_tokens == len(calls[0].prompt_ids)


async def test_concurrent_sessions_do_not_cross(llama_gateway):
    sessions = [llama_gateway.open_session() for _ in range(12)]

    async def program(number, session):
        async with client_for(session) as client:
            answer = await client.chat.completions.create(
                model="smollm2",
                messages=[{"role": "user", "content": f"Repeat: {number}"}],
                max_tokens=3,
            )
        return answer.choices[0]

    choices = await asyncio.gather(*(program(n, s) for n, s in enumerate(sessions)))
    for number, (session, choice) in enumerate(zip(sessions, choices, strict=True)):
        [call] = llama_gateway.close_session(session.id)
        assert call.messages[0]["content"] == f"Repeat: {number}"
        assert call.completion_ids == choice.model_extra["token_ids"]
        assert call.text == choice.message.content


async def test_the_servers_context_limit_becomes_a_context_error(llama_gateway):
    session = llama_gateway.open_session()
    async with client_for(session) as client:
        with pytest.raises(openai.BadRequestError, match="maximum context length") as caught:
            await client.chat.completions.create(
                model="smollm2",
                messages=[{"role": "user", "content": "word " * 3000}],
                max_tokens=2,
            )
    assert caught.value.body["code"] == "context_length_exceeded"


async def test_without_a_tokenizer_messages_pass_through(llamacpp_server, smollm2_tokenizer):
    """A chat-mode engine with no tokenizer: the server renders; the recording holds what the
    engine reports (no ids here), and build_sequences re-renders it when given a tokenizer."""
    engine = OpenAIEngine(llamacpp_server.base_url, llamacpp_server.model_alias, max_retries=1)
    messages = [{"role": "user", "content": "Say hi."}]
    try:
        async with Gateway(engine) as gateway:
            assert gateway.tokenizer is None
            session = gateway.open_session()
            async with client_for(session) as client:
                answer = await client.chat.completions.create(
                    model="smollm2", messages=messages, max_tokens=3, temperature=0
                )
            [call] = gateway.close_session(session.id)
    finally:
        await engine.aclose()
    assert call.text == answer.choices[0].message.content
    assert call.prompt_ids == [] and call.completion_ids == []
    [sequence], report = build_sequences([call], tokenizer=smollm2_tokenizer)
    assert report.retokenised_calls == 1
    assert sequence.prompt_ids == render_prompt_ids(smollm2_tokenizer, messages)
    assert sequence.response_ids == encode(smollm2_tokenizer, call.text)
    assert build_sequences([call])[1].skipped_calls == 1
