"""Requests the gateway cannot serve get OpenAI-shaped errors with the right status."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from rllm_agents.engines.local import LocalEngine
from rllm_agents.gateway import Gateway

from tests.parts import require_module

openai = require_module("openai", "the openai package (a dev dependency)")

USER = [{"role": "user", "content": "hi"}]


def _client(base_url: str, api_key: str = "k"):
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)


@pytest.mark.parametrize(
    ("request_body", "param", "message"),
    [
        ({"messages": []}, "messages", "non-empty list of messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0]", "role"),
        ({"messages": USER, "temperature": 3}, "temperature", "between 0 and 2"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens", "at least 1"),
        ({"messages": USER, "n": 0}, "n", "between 1 and 128"),
        ({"messages": USER, "stop": [""]}, "stop", "stop must be"),
        ({"messages": USER, "presence_penalty": 0.5}, "presence_penalty", "not supported"),
        ({"messages": USER, "tool_choice": "required"}, "tool_choice", "only 'auto' and 'none'"),
        ({"messages": USER, "top_logprobs": 2}, "top_logprobs", "needs logprobs"),
        ({"messages": USER, "tools": [{"type": "function"}]}, "tools[0]", "expected"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content",
            "only text content parts",
        ),
    ],
)
async def test_bad_chat_requests_raise_bad_request_with_the_reason(
    tiny_gateway, request_body, param, message
):
    async with _client(tiny_gateway.base_url) as client:
        with pytest.raises(openai.BadRequestError, match=message) as caught:
            await client.chat.completions.create(model="m", **request_body)
    error = caught.value
    assert error.status_code == 400
    assert error.body["param"] == param and error.body["type"] == "invalid_request_error"


async def test_bad_json_and_unknown_paths_get_error_objects(tiny_gateway):
    async with aiohttp.ClientSession() as http:
        url = tiny_gateway.base_url + "/chat/completions"
        async with http.post(url, data=b"{not json") as response:
            assert response.status == 400
            error = (await response.json())["error"]
        assert "not valid JSON" in error["message"]
        assert set(error) == {"message", "type", "param", "code"}
        async with http.post(url, json=[1, 2]) as response:
            assert response.status == 400
        async with http.post(url, json={"model": "m"}) as response:  # no messages at all
            assert response.status == 400
            assert (await response.json())["error"]["param"] == "messages"
        async with http.get(tiny_gateway.url + "/v1/embeddings") as response:
            assert response.status == 404
            assert "Not Found" in (await response.json())["error"]["message"]
        async with http.get(url) as response:
            assert response.status == 405
            assert (await response.json())["error"]["type"] == "invalid_request_error"


async def test_a_wrong_or_missing_key_is_refused(tiny_engine):
    async with Gateway(tiny_engine, api_key="secret") as gateway:
        session = gateway.open_session()
        assert session.api_key == "secret"
        async with _client(session.base_url, api_key="wrong") as client:
            with pytest.raises(openai.AuthenticationError, match="wrong or missing API key"):
                await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
            with pytest.raises(openai.AuthenticationError):
                await client.models.list()
        async with _client(session.base_url, api_key="secret") as client:
            await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
        assert len(session.calls) == 1


async def test_unknown_and_closed_sessions_are_not_found(tiny_gateway):
    session = tiny_gateway.open_session("done")
    tiny_gateway.close_session("done")
    async with _client(session.base_url) as client:
        with pytest.raises(openai.NotFoundError, match="no open session 'done'") as caught:
            await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
    assert caught.value.body["code"] == "session_not_found"
    with pytest.raises(KeyError):
        tiny_gateway.close_session("done")
    with pytest.raises(ValueError, match="already open"):
        tiny_gateway.open_session("twice")
        tiny_gateway.open_session("twice")
    with pytest.raises(ValueError, match="unknown sampling defaults"):
        tiny_gateway.open_session(sampling_defaults={"temprature": 1})
    with pytest.raises(ValueError, match="letters, digits"):
        tiny_gateway.open_session("a/b")


async def test_a_prompt_longer_than_the_context_is_refused_as_such(tiny_gateway):
    session = tiny_gateway.open_session()
    long = [{"role": "user", "content": "word " * 9000}]
    async with _client(session.base_url) as client:
        with pytest.raises(openai.BadRequestError, match="does not fit") as caught:
            await client.chat.completions.create(model="m", messages=long, max_tokens=2)
        with pytest.raises(openai.BadRequestError, match="token-id prompts|prompt"):
            await client.completions.create(model="m", prompt=[], max_tokens=2)
    assert caught.value.body["code"] == "context_length_exceeded"
    # Both refusals count, the one of the engine and the one of the request itself.
    assert session.calls == [] and session.failed_calls == 2


async def test_max_tokens_beyond_the_model_s_context_is_refused(tiny_gateway, tiny_engine):
    # Checked first: without the limit the request below would generate a whole context.
    assert tiny_gateway.context_length == tiny_engine.context_length == 8192
    async with _client(tiny_gateway.base_url) as client:
        with pytest.raises(openai.BadRequestError, match="context holds at most 8192") as caught:
            await client.chat.completions.create(model="m", messages=USER, max_tokens=10**12)
    assert caught.value.body["param"] == "max_tokens"


async def test_token_ids_outside_the_vocabulary_fail_alone(tiny_gateway):
    async with _client(tiny_gateway.base_url) as client:
        beside, outside = await asyncio.gather(
            client.completions.create(model="m", prompt=[1, 2, 3], max_tokens=2),
            client.completions.create(model="m", prompt=[1, 10**9], max_tokens=2),
            return_exceptions=True,
        )
    assert isinstance(outside, openai.BadRequestError) and "vocabulary" in str(outside)
    assert beside.choices[0].text is not None  # the batch it would have joined is unharmed


async def test_an_engine_failure_is_a_server_error_not_a_hang():
    engine = LocalEngine.from_name("tiny")
    engine.close()  # every generate now fails
    async with Gateway(engine) as gateway:
        session = gateway.open_session()
        async with _client(session.base_url) as client:
            with pytest.raises(openai.InternalServerError, match="engine failed") as caught:
                await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
        assert caught.value.status_code == 500
        assert caught.value.response.headers["x-should-retry"] == "false"
        gateway.engine = None
        async with _client(session.base_url) as client:
            with pytest.raises(openai.InternalServerError) as caught:
                await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
        assert caught.value.status_code == 503
    assert session.failed_calls == 2


def test_sessions_open_only_on_a_started_gateway(tiny_engine):
    with pytest.raises(RuntimeError, match="start the gateway"):
        Gateway(tiny_engine).open_session()
