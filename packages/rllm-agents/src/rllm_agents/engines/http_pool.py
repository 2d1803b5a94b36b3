"""`HttpPool`: keep-alive HTTP/1.1 connections to one model server, for JSON POSTs.

A rollout sends one small JSON POST per model turn, from hundreds of agents at once, to one
server. General-purpose clients spend most of their time on what this traffic never needs
(cookies, redirects, proxies, compression, tracing): aiohttp took 0.12 ms of CPU per request
here, this pool 0.04 ms, and at 256 agents the difference decided how far each round of
answers spread out on the event loop (``benchmarks/engine_throughput.py``).

What it speaks: HTTP/1.1 over TCP or TLS (``https://`` URLs, verified with the system's CA
store unless an ``ssl.SSLContext`` is given), request bodies with ``Content-Length``, responses
with ``Content-Length``, ``Transfer-Encoding: chunked`` or read-until-close. Idle connections are
reused; one the server closed while idle is noticed on the next request, which is sent again
once on a fresh connection (nothing can have reached the server). Every failure surfaces as
:class:`HttpTransportError` (connection refused, reset or dropped, malformed answer) or
``TimeoutError``; a connection that saw any failure or a cancellation is closed, never reused.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# Largest status line + headers accepted; a model server's are a few hundred bytes.
MAX_HEAD_BYTES = 1 << 20
_deadline = getattr(asyncio, "timeout", None)


class HttpTransportError(Exception):
    """The request got no complete HTTP answer (refused, reset, dropped, or malformed)."""


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time.

    Bytes are parsed as they arrive (no stream reader, no task per read): this is what keeps a
    request to a few tens of microseconds of CPU.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.answer: asyncio.Future[tuple[HttpResponse, bool]] | None = None
        self.reused = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.answer is None or self.answer.done():
            self.close()  # bytes nobody asked for: the connection's state is unknown
            return
        self.buffer += data
        self._settle(eof=False)

    def eof_received(self) -> bool:
        self._settle(eof=True)
        return False  # and close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._settle(eof=True)

    def _settle(self, eof: bool) -> None:
        answer = self.answer
        if answer is None or answer.done():
            return
        try:
            parsed = parse_response(self.buffer, eof)
        except HttpTransportError as exc:
            answer.set_exception(exc)
            return
        if parsed is not None:
            answer.set_result(parsed)
        elif eof and not self.buffer:
            answer.set_exception(_StaleConnection())
        elif eof:
            answer.set_exception(HttpTransportError("the server closed the connection mid-answer"))

    async def exchange(self, request: bytes) -> tuple[HttpResponse, bool]:
        self.buffer.clear()
        self.answer = asyncio.get_running_loop().create_future()
        if self.lost:
            raise _StaleConnection()
        self.transport.write(request)
        return await self.answer

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass(frozen=True)
class Origin:
    """Where requests go: scheme, host, port and the path prefix of the base URL."""

    host: str
    port: int
    tls: bool
    prefix: str

    @classmethod
    def parse(cls, base_url: str) -> Origin:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        tls = parts.scheme == "https"
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default_port = 443 if self.tls else 80
        return host if self.port == default_port else f"{host}:{self.port}"


@dataclass
class HttpPool:
    """Connections to one origin; at most ``max_connections`` requests in flight.

    Use it from one event loop (its semaphore belongs to the loop that first waits on it).
    """

    base_url: str
    headers: dict[str, str] = field(default_factory=dict)
    max_connections: int = 512
    ssl_context: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        self.origin = Origin.parse(self.base_url)
        fixed = {"Host": self.origin.host_header, "User-Agent": "rllm-agents", **self.headers}
        self._fixed_head = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._slots = asyncio.Semaphore(self.max_connections)
        self.closed = False
        if self.origin.tls and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()

    async def post_json(self, path: str, body: bytes, timeout: float | None) -> HttpResponse:
        """POST ``body`` (JSON bytes) to ``base_url + path``; the whole exchange within timeout."""
        if self.closed:
            raise HttpTransportError("the connection pool is closed")
        head = (
            f"POST {self.origin.prefix}{path} HTTP/1.1\r\n{self._fixed_head}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1")
        async with self._slots:
            if timeout is None:
                return await self._exchange(head + body)
            if _deadline is None:  # Python 3.10
                return await asyncio.wait_for(self._exchange(head + body), timeout)
            # asyncio.timeout (3.11+) cancels this task at the deadline; wait_for would run the
            # exchange as a task of its own, one more task and loop pass per request.
            async with _deadline(timeout):
                return await self._exchange(head + body)

    async def aclose(self) -> None:
        self.closed = True
        connections = [*self._idle, *self._busy]
        self._idle.clear()
        for connection in connections:
            connection.close()

    async def _exchange(self, request: bytes) -> HttpResponse:
        while True:
            connection = self._idle_connection() or await self._connect()
            self._busy.add(connection)
            try:
                response, keep = await connection.exchange(request)
            except _StaleConnection:
                connection.close()
                if connection.reused:
                    continue  # the server had closed this idle connection: use a new one
                raise HttpTransportError(
                    "the server closed the connection without answering"
                ) from None
            except BaseException:
                connection.close()  # failed, timed out or cancelled midway: never reuse it
                raise
            finally:
                self._busy.discard(connection)
            if keep and not self.closed and not connection.lost:
                connection.reused = True
                self._idle.append(connection)
            else:
                connection.close()
            return response

    def _idle_connection(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.lost:
                return connection
        return None

    async def _connect(self) -> _Connection:
        origin = self.origin
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                _Connection, origin.host, origin.port, ssl=self.ssl_context if origin.tls else None
            )
        except OSError as exc:
            raise HttpTransportError(f"cannot connect to {self.base_url}: {exc}") from exc
        return connection


class _StaleConnection(Exception):
    """A reused connection ended before any byte of the answer."""


def parse_response(buffer: bytes | bytearray, eof: bool) -> tuple[HttpResponse, bool] | None:
    """(response, connection reusable) once ``buffer`` holds a whole answer, else None.

    ``eof``: the server has closed the connection, which ends a body sent without a length.
    """
    head_end = buffer.find(b"\r\n\r\n")
    if head_end < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise HttpTransportError("the server's response headers are too large")
        return None
    status, version, headers = _parse_head(bytes(buffer[:head_end]))
    start = head_end + 4
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    length = headers.get("content-length")
    if chunked:
        body, end = _chunked_body(buffer, start)
    elif length is not None:
        end = start + _content_length(length)
        body = bytes(buffer[start:end]) if len(buffer) >= end else None
    else:
        body, end = (bytes(buffer[start:]), len(buffer)) if eof else (None, 0)
    if body is None:
        return None
    keep = version == "HTTP/1.1" and (chunked or length is not None)
    keep = keep and "close" not in headers.get("connection", "").lower()
    # Bytes beyond the answer were never asked for: the connection's state is unknown.
    keep = keep and len(buffer) == end
    return HttpResponse(status, headers, body), keep


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/"):
        raise HttpTransportError(f"not an HTTP answer: {lines[0][:100]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise HttpTransportError(f"bad HTTP status line: {lines[0][:100]!r}") from None
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return status, status_line[0], headers


def _content_length(value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        size = -1
    if size < 0:
        raise HttpTransportError(f"bad Content-Length {value!r}")
    return size


def _chunked_body(buffer: bytes | bytearray, position: int) -> tuple[bytes | None, int]:
    """(body, end offset) of a chunked answer starting at ``position``; None while incomplete."""
    chunks = []
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return None, 0
        size_field = bytes(buffer[position:line_end]).split(b";", 1)[0].strip()
        try:
            size = int(size_field, 16)
        except ValueError:
            raise HttpTransportError(f"bad chunk size {size_field[:40]!r}") from None
        if size == 0:
            # Optional trailers, then a blank line, end the body.
            blank = buffer.find(b"\r\n\r\n", line_end)
            return (b"".join(chunks), blank + 4) if blank >= 0 else (None, 0)
        data_start = line_end + 2
        if len(buffer) < data_start + size + 2:
            return None, 0
        chunks.append(bytes(buffer[data_start : data_start + size]))
        position = data_start + size + 2
