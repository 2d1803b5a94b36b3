"""The OpenAI engine's HTTP transport, against a scriptable loopback server on real sockets.

Keep-alive and its connection limit, servers that close connections (idle, mid-answer, without
answering), answer framings (length, chunked, read-until-close), malformed answers, timeouts,
TLS with a self-signed certificate, the model listing, and use from successive event loops or
on uvloop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import ssl
import subprocess

import pytest
from rllm_agents.engines import event_loop
from rllm_agents.engines.base import EngineError
from rllm_agents.engines.openai import OpenAIEngine

from tests.parts import require_module, require_part

MESSAGES = [{"role": "user", "content": "Which way?"}]
QUICK_BACKOFF = {"backoff_base_s": 0.01, "backoff_max_s": 0.02}
WAIT_FOR_CLIENT_TO_HANG_UP = b""


class HangUpAfter(bytes):
    """An answer after which the server closes the connection."""


def completion(text: str = "Left") -> bytes:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": "stop",
    }
    return json.dumps({"choices": [choice]}).encode()


def ok(body: bytes | None = None, *extra: bytes) -> bytes:
    body = completion() if body is None else body
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body)
    return head + b"".join(extra) + b"\r\n" + body


class Server:
    """Loopback HTTP server; ``answer(request_index) -> bytes | None`` (None: hang up).

    An empty answer (``WAIT_FOR_CLIENT_TO_HANG_UP``) answers nothing until the client leaves;
    a :class:`HangUpAfter` answer is sent, then the connection closed.
    """

    def __init__(self, answer, ssl_context: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.ssl_context = ssl_context
        self.requests = 0
        self.connections = 0
        self.open_connections = 0
        self.paths: list[str] = []
        self._server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", 0, ssl=self.ssl_context
        )
        return self

    async def __aexit__(self, *exc_info) -> None:
        self._server.close()
        await self._server.wait_closed()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def _handle(self, reader, writer) -> None:
        self.connections += 1
        self.open_connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                self.paths.append(lines[0].split(b" ")[1].decode())
                length = next(
                    (int(line.split(b":")[1]) for line in lines
                     if line.lower().startswith(b"content-length")),
                    0,
                )  # fmt: skip
                await reader.readexactly(length)
                self.requests += 1
                reply = self.answer(self.requests)
                if asyncio.iscoroutine(reply):
                    reply = await reply
                if reply is None:
                    return
                if reply == WAIT_FOR_CLIENT_TO_HANG_UP:
                    await reader.read()
                    return
                writer.write(reply)
                await writer.drain()
                if isinstance(reply, HangUpAfter):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.open_connections -= 1
            writer.close()


def engine_for(server: Server, **kwargs) -> OpenAIEngine:
    # A short timeout: a request the server will never answer fails the test quickly.
    return OpenAIEngine(server.url(), "m", **{"timeout": 5, **QUICK_BACKOFF, **kwargs})


# ---- connections -----------------------------------------------------------------------------


async def test_connections_are_kept_alive_and_reused():
    async with Server(lambda n: ok()) as server:
        engine = engine_for(server)
        for _ in range(5):
            assert (await engine.generate(MESSAGES)).text == "Left"
        await engine.aclose()
    assert (server.requests, server.connections) == (5, 1)
    assert server.paths == ["/v1/chat/completions"] * 5


async def test_concurrent_requests_get_their_own_connections_up_to_the_limit():
    release = asyncio.Event()

    async def slow(n):
        await release.wait()
        return ok(completion(f"answer {n}"))

    async with Server(slow) as server:
        engine = engine_for(server, max_connections=3)
        calls = [asyncio.ensure_future(engine.generate(MESSAGES)) for _ in range(6)]
        await asyncio.sleep(0.2)
        assert server.connections == 3  # the other three wait for a free connection
        release.set()
        outputs = await asyncio.gather(*calls)
        await engine.aclose()
    assert sorted(output.text for output in outputs) == [f"answer {n}" for n in range(1, 7)]
    assert server.connections == 3


async def test_idle_connection_closed_by_the_server_is_replaced_without_an_error():
    # The server answers, then drops the connection without saying so (as servers do when
    # their keep-alive timeout expires): with no retries allowed, the next request must still
    # go through, on a new connection.
    async with Server(lambda n: HangUpAfter(ok())) as server:
        engine = engine_for(server, max_retries=0)
        for _ in range(3):
            assert (await engine.generate(MESSAGES)).text == "Left"
            await asyncio.sleep(0.05)  # the hang-up reaches the client while it is idle
        await engine.aclose()
    assert server.connections == 3


async def test_connection_closed_as_a_request_arrives_is_retried():
    # The race a keep-alive timeout allows: the request goes out as the server hangs up.
    async with Server(lambda n: ok() if n % 2 else None) as server:
        engine = engine_for(server, max_retries=1)
        for _ in range(3):
            assert (await engine.generate(MESSAGES)).text == "Left"
        await engine.aclose()
    assert (server.requests, server.connections) == (5, 3)


async def test_server_that_hangs_up_without_answering_is_retried_then_an_error():
    async with Server(lambda n: None) as server:
        engine = engine_for(server, max_retries=2)
        with pytest.raises(EngineError, match="after 3 attempts: connection error"):
            await engine.generate(MESSAGES)
        await engine.aclose()
    assert server.requests == 3


async def test_connection_close_header_is_honoured():
    async with Server(lambda n: ok(None, b"Connection: close\r\n")) as server:
        engine = engine_for(server)
        for _ in range(3):
            await engine.generate(MESSAGES)
        await engine.aclose()
    assert server.connections == 3


def chunked(body: bytes) -> bytes:
    middle = len(body) // 2
    chunks = b"".join(
        b"%x;ext=1\r\n%s\r\n" % (len(part), part) for part in (body[:middle], body[middle:])
    )
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\nX-T: 1\r\n\r\n"  # fmt: skip


def until_close(body: bytes) -> bytes:
    return HangUpAfter(b"HTTP/1.0 200 OK\r\n\r\n" + body)


@pytest.mark.parametrize(
    ("framing", "connections"),
    [(ok, 1), (chunked, 1), (until_close, 2)],  # an answer without a length ends the connection
)
async def test_answer_framings(framing, connections):
    async with Server(lambda n: framing(completion(f"reply {n}"))) as server:
        engine = engine_for(server)
        outputs = [await engine.generate(MESSAGES) for _ in range(2)]
        await engine.aclose()
    assert [output.text for output in outputs] == ["reply 1", "reply 2"]
    assert server.connections == connections


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
        b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
        HangUpAfter(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}"),  # cut short
    ],
)
async def test_malformed_answers_are_retried_connection_errors(answer):
    async def reply_then_close(n):
        return answer if n < 3 else ok()

    async with Server(reply_then_close) as server:
        engine = engine_for(server, max_retries=1)
        with pytest.raises(EngineError, match="after 2 attempts: connection error"):
            await engine.generate(MESSAGES)
        await engine.aclose()


# ---- timeouts and closing ---------------------------------------------------------------------


async def test_timeout_closes_the_connection_and_frees_it_for_the_next_request():
    async with Server(lambda n: WAIT_FOR_CLIENT_TO_HANG_UP) as server:
        engine = engine_for(server, max_connections=1, timeout=0.2, max_retries=0)
        for _ in range(2):  # the second gets the connection slot the first gave back
            with pytest.raises(EngineError, match="timeout"):
                await engine.generate(MESSAGES)
        await asyncio.sleep(0.1)
        assert server.open_connections == 0  # timed-out connections are closed, not reused
        await engine.aclose()
    assert server.connections == 2


async def test_refused_connection_is_an_error_and_aclose_ends_every_connection():
    async with Server(lambda n: ok()) as server:
        url = server.url()
        engine = engine_for(server)
        await asyncio.gather(*(engine.generate(MESSAGES) for _ in range(4)))
        assert server.open_connections == 4
        await engine.aclose()
        await asyncio.sleep(0.1)
        assert server.open_connections == 0
        assert (await engine.generate(MESSAGES)).text == "Left"  # usable again after aclose
        await engine.aclose()
    refused = OpenAIEngine(url, "m", max_retries=1, **QUICK_BACKOFF)
    with pytest.raises(EngineError, match="after 2 attempts: connection error"):
        await refused.generate(MESSAGES)
    await refused.aclose()


def test_base_url_must_be_http_or_https():
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAIEngine("ftp://example.org/v1", "m")


def test_successive_event_loops_and_uvloop(caplog):
    """A blocking caller may run the engine from one loop, then another; and on uvloop."""
    require_module("uvloop", "uvloop is an rllm-agents dependency")

    async def serve_and_ask(engine_holder, use_engine):
        async with Server(lambda n: ok()) as server:
            if engine_holder[0] is None:
                engine_holder[0] = engine_for(server)
            engine_holder[0].base_url = server.url().rstrip("/")  # a new server per loop
            engine_holder[0]._urls = {}
            return await use_engine(engine_holder[0])

    holder = [None]

    async def ask(engine):
        return (await engine.generate(MESSAGES)).text

    caplog.set_level(logging.ERROR)
    assert asyncio.run(serve_and_ask(holder, ask)) == "Left"
    assert event_loop.run(serve_and_ask(holder, ask), use_uvloop=True) == "Left"
    assert event_loop.run(serve_and_ask(holder, ask), use_uvloop=False) == "Left"
    asyncio.run(holder[0].aclose())
    assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]


def test_uvloop_is_opt_in(monkeypatch):
    monkeypatch.delenv(event_loop.UVLOOP_SWITCH, raising=False)
    assert event_loop.uvloop_wanted() is False
    monkeypatch.setenv(event_loop.UVLOOP_SWITCH, "1")
    assert event_loop.uvloop_wanted() is True
    assert event_loop.uvloop_wanted(use_uvloop=False) is False


# ---- the model listing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "served"),
    [
        (ok(json.dumps({"data": [{"id": "a"}, {"id": "b"}]}).encode()), ["a", "b"]),
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", None),
        (ok(b"<html>models</html>"), None),
    ],
)
async def test_served_models(answer, served):
    async with Server(lambda n: answer) as server:
        engine = engine_for(server)
        assert await engine.served_models() == served
        await engine.aclose()
    assert server.paths == ["/v1/models"]


async def test_served_models_says_when_the_server_is_unreachable_or_refuses_the_key():
    async with Server(lambda n: b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n") as s:
        engine = engine_for(s, api_key="wrong")
        with pytest.raises(EngineError, match="refused the API key"):
            await engine.served_models()
        await engine.aclose()
        url = s.url()
    engine = OpenAIEngine(url, "m")
    with pytest.raises(EngineError, match="cannot reach the model server"):
        await engine.served_models()
    await engine.aclose()


# ---- TLS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1, made with the openssl command."""
    openssl = shutil.which("openssl")
    require_part(openssl is not None, "the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_with_a_trusted_certificate_and_refusal_of_an_untrusted_one(certificate):
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    async with Server(lambda n: ok(), ssl_context=server_context) as server:
        trusting = OpenAIEngine(
            server.url("https"), "m", ssl_context=ssl.create_default_context(cafile=cert)
        )
        assert (await trusting.generate(MESSAGES)).text == "Left"
        await trusting.aclose()
        # The system's CAs do not know this certificate: refused at once, never retried.
        default = OpenAIEngine(server.url("https"), "m", max_retries=5, backoff_base_s=10)
        with pytest.raises(EngineError, match="certificate"):
            await asyncio.wait_for(default.generate(MESSAGES), timeout=5)
        await default.aclose()
    assert server.requests == 1
