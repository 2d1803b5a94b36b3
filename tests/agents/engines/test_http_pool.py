"""HttpPool: the keep-alive HTTP/1.1 transport of the OpenAI engine, against real sockets."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess

import pytest
from rllm_agents.engines.http_pool import HttpPool, HttpTransportError, parse_response

from tests.parts import require_part

BODY = json.dumps({"prompt": "hi"}).encode()


# ---- parsing ---------------------------------------------------------------------------------


def test_content_length_answer_is_complete_only_with_all_its_bytes():
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nRetry-After: 2\r\n\r\n"
    assert parse_response(head + b"abc", eof=False) is None
    response, keep = parse_response(head + b"abcde", eof=False)
    assert (response.status, response.body, keep) == (200, b"abcde", True)
    assert response.headers["retry-after"] == "2"


def test_chunked_answer_with_extensions_and_trailers():
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4;name=x\r\nWiki\r\n5\r\npedia\r\n0\r\nExpires: never\r\n\r\n"
    )
    for cut in range(len(raw) - 1):  # any prefix is incomplete, never wrongly complete
        assert parse_response(raw[:cut], eof=False) is None
    response, keep = parse_response(raw, eof=False)
    assert (response.body, keep) == (b"Wikipedia", True)


def test_bytes_beyond_the_answer_make_the_connection_unusable():
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    response, keep = parse_response(head + b"{}" + b"HTTP/1.1 200", eof=False)
    assert (response.body, keep) == (b"{}", False)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    assert parse_response(chunked, eof=False)[1] is True
    assert parse_response(chunked + b"x", eof=False)[1] is False


def test_answer_without_length_ends_at_close_and_is_not_reused():
    raw = b"HTTP/1.1 200 OK\r\n\r\n{}"
    assert parse_response(raw, eof=False) is None
    response, keep = parse_response(raw, eof=True)
    assert (response.body, keep) == (b"{}", False)


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_connections_the_server_will_close_are_not_reused(head):
    _, keep = parse_response(head, eof=False)
    assert keep is False


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP answer"),
        (b"HTTP/1.1 abc OK\r\n\r\n", "bad HTTP status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * (1 << 20), "too large"),
    ],
)
def test_malformed_answers_are_transport_errors(raw, problem):
    with pytest.raises(HttpTransportError, match=problem):
        parse_response(raw, eof=False)


# ---- a scriptable server ---------------------------------------------------------------------


WAIT_FOR_CLIENT_TO_HANG_UP = b""


class Server:
    """Loopback HTTP server; ``answer(request_index) -> bytes | None`` (None: hang up).

    An empty answer (``WAIT_FOR_CLIENT_TO_HANG_UP``) answers nothing until the client leaves.
    """

    def __init__(self, answer, ssl_context: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.ssl_context = ssl_context
        self.requests = 0
        self.connections = 0
        self.open_connections = 0
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
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
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
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.open_connections -= 1
            writer.close()


def ok(body: bytes = b'{"ok": true}', *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body)
    return head + b"".join(extra) + b"\r\n" + body


# ---- behaviour -------------------------------------------------------------------------------


async def test_connections_are_kept_alive_and_reused():
    async with Server(lambda n: ok()) as server:
        pool = HttpPool(server.url())
        for _ in range(5):
            response = await pool.post_json("/completions", BODY, timeout=5)
            assert (response.status, json.loads(response.body)) == (200, {"ok": True})
        await pool.aclose()
    assert (server.requests, server.connections) == (5, 1)


async def test_concurrent_requests_get_their_own_connections_up_to_the_limit():
    release = asyncio.Event()

    async def slow(n):
        await release.wait()
        return ok(b'{"n": %d}' % n)

    async with Server(slow) as server:
        pool = HttpPool(server.url(), max_connections=3)
        calls = [asyncio.ensure_future(pool.post_json("/x", BODY, 5)) for _ in range(6)]
        await asyncio.sleep(0.2)
        assert server.connections == 3  # the other three wait for a free slot
        release.set()
        responses = await asyncio.gather(*calls)
        await pool.aclose()
    assert sorted(json.loads(r.body)["n"] for r in responses) == [1, 2, 3, 4, 5, 6]
    assert server.connections == 3


async def test_idle_connection_closed_by_the_server_is_replaced_silently():
    # The server answers, then drops the connection without saying so (as servers do when
    # their keep-alive timeout expires): the next request must not fail.
    def answer_then_hang_up(n):
        return ok() if n % 2 else None

    async with Server(answer_then_hang_up) as server:
        pool = HttpPool(server.url())
        for _ in range(3):
            assert (await pool.post_json("/x", BODY, 5)).status == 200
            await asyncio.sleep(0.05)  # the hang-up reaches the client while idle... or not
        await pool.aclose()
    assert server.connections >= 3


async def test_server_that_hangs_up_without_answering_is_an_error_not_a_retry_loop():
    async with Server(lambda n: None) as server:
        pool = HttpPool(server.url())
        with pytest.raises(HttpTransportError, match="without answering"):
            await pool.post_json("/x", BODY, 5)
        await pool.aclose()
    assert server.requests == 1


async def test_connection_close_header_is_honoured():
    async with Server(lambda n: ok(b"{}", b"Connection: close\r\n")) as server:
        pool = HttpPool(server.url())
        for _ in range(3):
            await pool.post_json("/x", BODY, 5)
        await pool.aclose()
    assert server.connections == 3


async def test_chunked_answer_over_the_wire():
    chunked = (
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"a\r\n5\r\n": 1}\r\n0\r\n\r\n'
    )
    async with Server(lambda n: chunked) as server:
        pool = HttpPool(server.url())
        responses = [await pool.post_json("/x", BODY, 5) for _ in range(2)]
        await pool.aclose()
    assert [json.loads(r.body) for r in responses] == [{"a": 1}, {"a": 1}]
    assert server.connections == 1


async def test_timeout_closes_the_connection_and_frees_the_slot():
    async with Server(lambda n: WAIT_FOR_CLIENT_TO_HANG_UP) as server:
        pool = HttpPool(server.url(), max_connections=1)
        with pytest.raises(asyncio.TimeoutError):
            await pool.post_json("/x", BODY, timeout=0.2)
        with pytest.raises(asyncio.TimeoutError):  # the slot was given back
            await pool.post_json("/x", BODY, timeout=0.2)
        await asyncio.sleep(0.1)
        assert server.open_connections == 0  # timed-out connections are closed, not reused
        await pool.aclose()


async def test_refused_connection_and_closed_pool_are_transport_errors():
    async with Server(lambda n: ok()) as server:
        url = server.url()
    pool = HttpPool(url)
    with pytest.raises(HttpTransportError, match="cannot connect"):
        await pool.post_json("/x", BODY, 5)
    await pool.aclose()
    with pytest.raises(HttpTransportError, match="closed"):
        await pool.post_json("/x", BODY, 5)


async def test_aclose_closes_every_connection():
    async with Server(lambda n: ok()) as server:
        pool = HttpPool(server.url())
        await asyncio.gather(*(pool.post_json("/x", BODY, 5) for _ in range(4)))
        assert server.open_connections == 4
        await pool.aclose()
        await asyncio.sleep(0.1)
        assert server.open_connections == 0


def test_base_url_must_be_http_or_https():
    with pytest.raises(ValueError, match="http:// or https://"):
        HttpPool("ftp://example.org/v1")


# ---- TLS -------------------------------------------------------------------------------------


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
        trusting = HttpPool(
            server.url("https"), ssl_context=ssl.create_default_context(cafile=cert)
        )
        assert (await trusting.post_json("/x", BODY, 5)).status == 200
        await trusting.aclose()
        default = HttpPool(server.url("https"))  # the system's CAs do not know this certificate
        with pytest.raises(HttpTransportError, match="certificate"):
            await default.post_json("/x", BODY, 5)
        await default.aclose()
