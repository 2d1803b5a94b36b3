"""The gateway in front of the local engine on the tiny model, driven by the real openai client."""

from __future__ import annotations

import asyncio

import pytest
from rllm_agents.chat.tito import render_prompt_ids
from rllm_agents.engines.base import SamplingParams
from rllm_agents.gateway import SESSION_HEADER, Gateway, build_sequences

from tests.agents.gateway.clients import client_for
from tests.parts import require_module

openai = require_module("openai", "the openai package (a dev dependency)")

SYSTEM = {"role": "system", "content": "You are terse."}


def ids_of(choice) -> list[int]:
    """The completion token ids the gateway sends along (vLLM's extension field)."""
    return choice.model_extra["token_ids"]


async def test_a_chat_call_records_exactly_what_the_engine_saw(tiny_gateway, tiny_engine):
    session = tiny_gateway.open_session()
    messages = [SYSTEM, {"role": "user", "content": "Name a colour."}]
    async with client_for(session) as client:
        answer = await client.chat.completions.create(
            model="any-name", messages=messages, max_tokens=6, seed=7, logprobs=True
        )
    choice = answer.choices[0]
    [call] = session.calls
    tokenizer = tiny_engine.tokenizer
    assert call.prompt_ids == render_prompt_ids(tokenizer, messages)
    assert call.prompt_ids == choice.model_extra["prompt_token_ids"]  # the engine's own report
    assert call.completion_ids == ids_of(choice)
    assert call.text == choice.message.content
    assert [entry.logprob for entry in choice.logprobs.content] == call.logprobs
    assert len(call.logprobs) == len(call.completion_ids) == answer.usage.completion_tokens
    assert call.sampling["seed"] == 7 and call.sampling["max_tokens"] == 6
    assert call.messages == messages and call.index == 0 and call.endpoint == "chat"
    # The same request made to the engine directly samples the same tokens.
    direct = await tiny_engine.generate(
        prompt_ids=call.prompt_ids, sampling=SamplingParams(max_tokens=6, seed=7)
    )
    assert direct.completion_ids == call.completion_ids
    assert direct.logprobs == pytest.approx(call.logprobs, abs=1e-4)


async def test_a_conversation_under_a_prefix_keeping_template_is_one_sequence(tiny_gateway):
    session = tiny_gateway.open_session(sampling_defaults={"max_tokens": 5, "seed": 3})
    messages = [SYSTEM, {"role": "user", "content": "Count with me."}]
    async with client_for(session) as client:
        for turn in range(3):
            answer = await client.chat.completions.create(model="m", messages=messages)
            reply = answer.choices[0].message.content
            messages = [*messages, {"role": "assistant", "content": reply}]
            messages.append({"role": "user", "content": f"Next ({turn})."})
    calls = tiny_gateway.close_session(session.id)
    [sequence], report = build_sequences(calls)
    assert (report.sequences, report.merged_calls, report.split_calls) == (1, 2, 0)
    assert report.sessions_merged == 1 and report.sessions_split == 0
    assert [call.extends for call in calls] == [None, 0, 1]
    _assert_sequence_holds_its_calls(sequence, calls)


async def test_a_template_that_drops_earlier_thinking_gives_separate_exact_sequences(
    think_dropping_engine,
):
    async with Gateway(think_dropping_engine) as gateway:
        session = gateway.open_session(sampling_defaults={"max_tokens": 6, "seed": 11})
        messages = [SYSTEM, {"role": "user", "content": "Think, then answer."}]
        async with client_for(session) as client:
            first = await client.chat.completions.create(model="m", messages=messages)
            messages += [
                {"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "And again."},
            ]
            await client.chat.completions.create(model="m", messages=messages)
        calls = gateway.close_session(session.id)
    tokenizer = think_dropping_engine.tokenizer
    # What the model saw: each prompt is the template's own rendering, nothing spliced.
    assert calls[0].prompt_ids == render_prompt_ids(tokenizer, messages[:2])
    assert calls[1].prompt_ids == render_prompt_ids(tokenizer, messages)
    assert calls[1].extends is None
    sequences, report = build_sequences(calls)
    assert (report.sequences, report.merged_calls, report.split_calls) == (2, 0, 1)
    assert report.sessions_split == 1 and report.rewritten_calls == 1
    assert [note.reason for note in report.splits] == ["template"]
    for sequence, call in zip(sequences, calls, strict=True):
        _assert_sequence_holds_its_calls(sequence, [call])
        assert sequence.prompt_ids == call.prompt_ids
        assert sequence.response_ids == call.completion_ids
        assert sequence.response_mask == [1] * len(call.completion_ids)


def _assert_sequence_holds_its_calls(sequence, calls) -> None:
    """Every call's prompt + completion is a prefix of the sequence; mask 1 exactly on the
    completions, which carry their logprobs; everything between calls has mask 0."""
    tokens = sequence.prompt_ids + sequence.response_ids
    mask = [0] * len(sequence.prompt_ids) + sequence.response_mask
    logprobs = [0.0] * len(sequence.prompt_ids) + sequence.response_logprobs
    generated = set()
    for call in calls:
        start, end = len(call.prompt_ids), len(call.prompt_ids) + len(call.completion_ids)
        assert tokens[:start] == call.prompt_ids
        assert tokens[start:end] == call.completion_ids
        assert logprobs[start:end] == call.logprobs
        generated.update(range(start, end))
    assert [i for i, m in enumerate(mask) if m] == sorted(generated)
    assert len(tokens) == len(calls[-1].prompt_ids) + len(calls[-1].completion_ids)
    assert len(sequence.response_logprobs) == len(sequence.response_ids)


async def test_n_choices_are_sampled_apart_and_each_starts_a_branch(tiny_gateway):
    session = tiny_gateway.open_session()
    messages = [SYSTEM, {"role": "user", "content": "Pick a word."}]
    async with client_for(session) as client:
        answer = await client.chat.completions.create(
            model="m", messages=messages, n=3, max_tokens=6, seed=5
        )
        again = await client.chat.completions.create(
            model="m", messages=messages, n=3, max_tokens=6, seed=5
        )
        assert [c.index for c in answer.choices] == [0, 1, 2]
        texts = [c.message.content for c in answer.choices]
        assert len(set(texts)) == 3  # seed + i per choice
        assert texts == [c.message.content for c in again.choices]  # and reproducible
        chosen = answer.choices[1].message.content
        follow = [*messages, {"role": "assistant", "content": chosen}]
        follow.append({"role": "user", "content": "Why?"})
        await client.chat.completions.create(model="m", messages=follow, max_tokens=4)
    calls = tiny_gateway.close_session(session.id)
    assert [(c.index, c.choice_index) for c in calls] == [(0, 0), (0, 1), (0, 2)] + [
        (1, 0),
        (1, 1),
        (1, 2),
    ] + [(2, 0)]
    assert [c.sampling["seed"] for c in calls[:3]] == [5, 6, 7]
    assert calls[-1].extends == 0  # reused choice 1's own tokens
    sequences, report = build_sequences(calls)
    assert report.sequences == 6 and report.merged_calls == 1
    assert report.split_reasons == {"branch": 5}
    [continued] = [s for s in sequences if len(s.steps) == 2]
    assert continued.info["calls"] == [[0, 1], [2, 0]]
    _assert_sequence_holds_its_calls(continued, [calls[1], calls[-1]])


async def test_streaming_sends_the_recorded_answer_as_chunks_with_usage(tiny_gateway):
    session = tiny_gateway.open_session()
    messages = [SYSTEM, {"role": "user", "content": "Stream it."}]
    async with client_for(session) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=messages,
            max_tokens=7,
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
        )
        content, finish, usage, logprobs = "", None, None, []
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
                finish = choice.finish_reason or finish
                if choice.logprobs is not None:
                    logprobs += [entry.logprob for entry in choice.logprobs.content]
    [call] = session.calls
    assert content == call.text and finish == call.finish_reason
    assert logprobs == call.logprobs
    assert usage.completion_tokens == len(call.completion_ids)
    assert usage.prompt_tokens == len(call.prompt_ids)


async def test_the_raw_stream_ends_with_done(tiny_gateway):
    import aiohttp

    body = {"model": "m", "prompt": "Once", "max_tokens": 3, "stream": True}
    async with aiohttp.ClientSession() as http:
        async with http.post(tiny_gateway.base_url + "/completions", json=body) as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            events = (await response.text()).strip().split("\n\n")
    assert events[-1] == "data: [DONE]"
    assert all(event.startswith("data: {") for event in events[:-1])


async def test_64_concurrent_sessions_keep_their_own_tokens(tiny_gateway):
    sessions = [tiny_gateway.open_session() for _ in range(64)]
    received: dict[str, list[list[int]]] = {}

    async def program(number: int, session) -> None:
        messages = [SYSTEM, {"role": "user", "content": f"Session {number} says hello."}]
        async with client_for(session) as client:
            for _ in range(2):
                answer = await client.chat.completions.create(
                    model="m", messages=messages, max_tokens=4
                )
                choice = answer.choices[0]
                received.setdefault(session.id, []).append(ids_of(choice))
                messages = [*messages, {"role": "assistant", "content": choice.message.content}]
                messages.append({"role": "user", "content": f"Session {number} again."})

    await asyncio.gather(*(program(n, s) for n, s in enumerate(sessions)))
    for number, session in enumerate(sessions):
        calls = tiny_gateway.close_session(session.id)
        assert [call.completion_ids for call in calls] == received[session.id]
        tag = f"Session {number} says hello."
        assert all(call.messages[1]["content"] == tag for call in calls)
        [sequence], report = build_sequences(calls)  # its two calls, token for token
        assert report.merged_calls == 1
        _assert_sequence_holds_its_calls(sequence, calls)
    assert tiny_gateway.open_sessions == []


async def test_text_and_token_id_prompts_on_the_completions_endpoint(tiny_gateway, tiny_engine):
    session = tiny_gateway.open_session()
    async with client_for(session) as client:
        text = await client.completions.create(
            model="m", prompt="The sky is", max_tokens=4, logprobs=1, seed=1
        )
        ids = await client.completions.create(
            model="m", prompt=[[1, 2, 3], [4, 5]], max_tokens=3, n=2
        )
    calls = session.calls
    assert calls[0].prompt_ids == list(tiny_engine.tokenizer.encode("The sky is"))
    assert calls[0].text == text.choices[0].text and calls[0].messages is None
    assert text.choices[0].logprobs.token_logprobs == calls[0].logprobs
    assert [c.prompt_ids for c in calls[1:]] == [[1, 2, 3]] * 2 + [[4, 5]] * 2
    assert [c.index for c in ids.choices] == [0, 1, 2, 3]
    assert [c.choice_index for c in calls[1:]] == [0, 1, 2, 3]
    assert [c.model_extra["token_ids"] for c in ids.choices] == [
        c.completion_ids for c in calls[1:]
    ]


async def test_a_session_header_on_the_plain_url_records_too(tiny_gateway):
    session = tiny_gateway.open_session("by-header")
    async with openai.AsyncOpenAI(
        base_url=tiny_gateway.base_url,
        api_key="unused",
        default_headers={SESSION_HEADER: session.id},
        max_retries=0,
    ) as client:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        models = await client.models.list()
    assert [model.id for model in models.data] == ["rllm-gateway"]
    assert len(session.calls) == 1
    async with openai.AsyncOpenAI(
        base_url=tiny_gateway.base_url, api_key="unused", max_retries=0
    ) as client:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert len(session.calls) == 1  # the plain URL records nothing
