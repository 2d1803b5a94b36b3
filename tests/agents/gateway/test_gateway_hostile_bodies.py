"""The gateway holds up against any body: deep nesting and oversized bodies are refused before
parsing, a client that hangs up mid-body costs one debug line, an impossible ``max_tokens`` is
refused naming the limit, and thousands of malformed requests get 4xx answers, never a 5xx.

The gateway here fronts :class:`InstantEngine`, which answers at once: these tests are about
the HTTP and JSON handling, not about a model.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from rllm_agents.engines.base import ModelOutput, SamplingParams
from rllm_agents.gateway import Gateway

from tests.agents.gateway.clients import client_for
from tests.agents.gateway.hostile_bodies import CHAT, Probe, hostile_probes
from tests.parts import require_module

openai = require_module("openai", "the openai package (a dev dependency)")

CONTEXT_LENGTH = 8192
MAX_BODY_BYTES = 128 * 1024
REPLY = 'Fine. <tool_call>{"name": "lookup", "arguments": {"word": "cat"}}</tool_call>'
USER = [{"role": "user", "content": "hi"}]


@dataclass
class InstantEngine:
    """Answers every prompt at once with :data:`REPLY` (tokenised by `tokenizer` when given)."""

    tokenizer: Any = None
    context_length: int = CONTEXT_LENGTH

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        ids = self.tokenizer.encode(REPLY) if self.tokenizer is not None else [1, 2, 3]
        return ModelOutput(
            text=REPLY,
            prompt_ids=list(prompt_ids or []),
            completion_ids=ids,
            logprobs=[-0.5] * len(ids),
        )

    async def aclose(self) -> None:
        pass


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_engine):
    """The tiny model's tokenizer, borrowed from the session's engine (most workers have it
    loaded already) so the module loads nothing of its own."""
    return tiny_engine.tokenizer


@pytest.fixture
async def instant_gateway(tiny_tokenizer):
    """A gateway with the tiny model's tokenizer and chat template, and a 128 KiB body limit."""
    async with Gateway(InstantEngine(tiny_tokenizer), max_body_bytes=MAX_BODY_BYTES) as gateway:
        yield gateway


async def raw_exchange(gateway: Gateway, request: bytes, *, hang_up: bool = False) -> bytes:
    """Send `request` bytes as they are on a new connection and read the first answer
    (nothing when the client hangs up right after sending)."""
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    try:
        writer.write(request)
        await writer.drain()
        return b"" if hang_up else await asyncio.wait_for(read_answer(reader), 10)
    finally:
        writer.close()


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    return head + await reader.readexactly(int(length.group(1)) if length else 0)


def http_request(url_path: str, body: bytes, *, content_length: str | None = None) -> bytes:
    """An HTTP/1.1 POST whose Content-Length line says `content_length` (the true one if None);
    the server closes the connection after answering."""
    length = content_length if content_length is not None else str(len(body))
    head = f"POST {url_path} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n"
    return f"{head}Content-Length: {length}\r\n\r\n".encode() + body


def statuses(answer: bytes) -> list[int]:
    """The status codes of the HTTP responses in `answer`."""
    return [int(line.split()[1]) for line in answer.split(b"\r\n") if line.startswith(b"HTTP/1.")]


def loud_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]


# ---- nesting and size, checked before parsing ---------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b"[" * 129 + b"]" * 129,
        b'{"messages":' + b'[{"a":' * 70 + b"1" + b"}]" * 70 + b"}",
    ],
    ids=["100k-open", "129-closed", "141-in-a-field"],
)
async def test_deep_nesting_is_refused_before_parsing(instant_gateway, caplog, body):
    async with aiohttp.ClientSession() as http:
        async with http.post(instant_gateway.base_url + CHAT, data=body) as response:
            error = (await response.json())["error"]
    assert response.status == 400
    assert "nest" in error["message"] and "at most 128" in error["message"]
    assert error["type"] == "invalid_request_error"
    assert not loud_records(caplog)


async def test_brackets_inside_strings_are_text_not_nesting(instant_gateway):
    content = '[[[{"' * 2000 + '\\"]]]'
    async with client_for(instant_gateway.open_session()) as client:
        answer = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": content}], max_tokens=2
        )
    assert answer.choices[0].message.content == REPLY


async def test_an_oversized_body_is_refused_from_its_length_before_it_is_read(instant_gateway):
    # The client says 10 GB and sends a few bytes: the answer comes at once, not after the body.
    request = http_request("/v1" + CHAT, b'{"messages": [', content_length=str(10**10))
    answer = await raw_exchange(instant_gateway, request)
    assert statuses(answer) == [413]
    assert b"10000000000 bytes" in answer and b"at most 131072 bytes" in answer
    assert b'"type":"invalid_request_error"' in answer


async def test_an_oversized_body_without_a_length_is_refused_with_the_limit(instant_gateway):
    async def chunks():
        for _ in range(MAX_BODY_BYTES // 8192 + 1):
            yield b" " * 8192

    async with aiohttp.ClientSession() as http:
        async with http.post(instant_gateway.base_url + CHAT, data=chunks()) as response:
            error = (await response.json())["error"]
    assert response.status == 413
    assert "at most 131072 bytes" in error["message"]


# ---- a client that hangs up -------------------------------------------------------------------


async def test_a_client_hanging_up_mid_body_is_one_debug_line(instant_gateway, caplog):
    caplog.set_level(logging.DEBUG, logger="rllm_agents.gateway")
    session = instant_gateway.open_session()
    url_path = f"/sessions/{session.id}/v1" + CHAT
    request = http_request(url_path, b'{"messages": [{"role"', content_length="1000")
    await raw_exchange(instant_gateway, request, hang_up=True)
    deadline = time.monotonic() + 5
    while session.failed_calls == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    gateway_lines = [r for r in caplog.records if r.name.startswith("rllm_agents.gateway")]
    assert [r.levelno for r in gateway_lines] == [logging.DEBUG]
    assert "disconnected" in gateway_lines[0].getMessage()
    assert gateway_lines[0].exc_info is None  # one line, no traceback
    assert not loud_records(caplog)
    assert session.failed_calls == 1 and session.calls == []


# ---- max_tokens beyond the context ------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
async def test_max_tokens_beyond_the_context_is_refused_naming_the_limit(instant_gateway, field):
    session = instant_gateway.open_session()
    async with client_for(session) as client:
        with pytest.raises(openai.BadRequestError, match=f"at most {CONTEXT_LENGTH}") as caught:
            await client.chat.completions.create(model="m", messages=USER, **{field: 10**12})
        assert caught.value.body["param"] == field
        with pytest.raises(openai.BadRequestError, match="context"):
            await client.completions.create(  # the client knows max_tokens only here
                model="m", prompt="hi", extra_body={field: CONTEXT_LENGTH + 1}
            )
        # The whole context is still a possible request (the prompt then cuts it short).
        await client.chat.completions.create(model="m", messages=USER, **{field: CONTEXT_LENGTH})
    assert session.failed_calls == 2
    assert [call.sampling["max_tokens"] for call in session.calls] == [CONTEXT_LENGTH]


async def test_an_engine_without_a_known_context_gets_max_tokens_as_asked(tiny_tokenizer):
    engine = InstantEngine(tiny_tokenizer, context_length=None)
    async with Gateway(engine) as gateway:
        session = gateway.open_session()
        async with client_for(session) as client:
            await client.chat.completions.create(model="m", messages=USER, max_tokens=10**12)
    assert session.calls[0].sampling["max_tokens"] == 10**12


async def test_a_given_context_length_wins_over_the_engine_s(tiny_tokenizer):
    async with Gateway(InstantEngine(tiny_tokenizer), context_length=16) as gateway:
        async with client_for(gateway.open_session()) as client:
            with pytest.raises(openai.BadRequestError, match="at most 16"):
                await client.chat.completions.create(model="m", messages=USER, max_tokens=17)


# ---- fuzz -------------------------------------------------------------------------------------

DRAWN_PROBES = 1000
FUZZ_SEED = 20240611


async def send(http: aiohttp.ClientSession, base_url: str, probe: Probe) -> tuple[int, bytes]:
    async with http.post(
        base_url + probe.path, data=probe.body, headers={"Content-Type": "application/json"}
    ) as response:
        return response.status, await response.read()


def wrong_answer(probe: Probe, status: int, body: bytes) -> str | None:
    """Why this answer is wrong for `probe`, or None when it is right."""
    if status >= 500:
        return f"{status} {body[:300]!r}"
    if probe.valid and status != 200:
        return f"a valid request got {status} {body[:300]!r}"
    if status != 200 and not body.startswith(b'{"error":{"message":'):
        return f"{status} without an OpenAI error object: {body[:300]!r}"
    return None


async def test_thousands_of_malformed_bodies_get_4xx_never_5xx(instant_gateway, caplog):
    probes = hostile_probes(FUZZ_SEED, DRAWN_PROBES)
    session = instant_gateway.open_session()
    bases = [instant_gateway.base_url, session.base_url]
    in_flight = asyncio.Semaphore(8)

    async def check(index: int, probe: Probe) -> tuple[str, str] | None:
        async with in_flight:
            status, body = await send(http, bases[index % 2], probe)
        problem = wrong_answer(probe, status, body)
        return (problem, probe.describe()) if problem else None

    async with aiohttp.ClientSession() as http:
        answers = await asyncio.gather(*(check(i, p) for i, p in enumerate(probes)))
    wrong = [answer for answer in answers if answer]
    kinds = {problem: example for problem, example in wrong}  # one example of each
    assert not wrong, f"{len(wrong)} of {len(probes)} wrong, {len(kinds)} kinds:\n" + "\n".join(
        f"{problem}\n    for {example}" for problem, example in kinds.items()
    )
    assert not loud_records(caplog)
    # Still serving: the official client gets its answer.
    async with client_for(session) as client:
        answer = await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
    assert answer.choices[0].message.content == REPLY


@pytest.mark.parametrize(
    ("body", "content_length"),
    [
        (b'{"messages": [{"role": "user", "content": "hi"}]}', "10"),  # shorter: JSON cut short
        (b'{"messages": []}', "abc"),
        (b'{"messages": []}', "-1"),
        (b'{"messages": []}', "1e3"),
        (b'{"messages": []}', "16\r\nContent-Length: 3"),
        (b'{"messages": []}', "16\r\nTransfer-Encoding: chunked"),
        (b"zz\r\n{}\r\n0\r\n\r\n", "0\r\nTransfer-Encoding: chunked"),
    ],
)
async def test_a_wrong_content_length_gets_4xx(instant_gateway, caplog, body, content_length):
    request = http_request("/v1" + CHAT, body, content_length=content_length)
    answer = await raw_exchange(instant_gateway, request)
    assert statuses(answer) and all(400 <= status < 500 for status in statuses(answer)), answer
    assert not loud_records(caplog)
    async with client_for(instant_gateway.open_session()) as client:
        await client.chat.completions.create(model="m", messages=USER, max_tokens=2)
