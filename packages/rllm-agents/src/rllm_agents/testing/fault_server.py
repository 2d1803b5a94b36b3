"""A loopback OpenAI-compatible HTTP server that misbehaves on purpose.

It answers ``POST /v1/chat/completions`` and ``POST /v1/completions`` (and ``GET /v1/models``)
with canned completions after a fixed latency, and injects faults chosen per request:

=========  ==========================================================================
``ok``      a normal 200 answer
``500``     HTTP 500 with a JSON error body
``429``     HTTP 429 with ``Retry-After: 0``
``drop``    the connection is closed without any response
``stall``   the server holds the request for ``stall_s`` seconds, then drops it
``garbage`` HTTP 200 whose body is not JSON
=========  ==========================================================================

``script`` lists the fault of each request in arrival order (requests after the script are
``ok``; with ``cycle=True`` the script repeats forever). It is a real server on a real socket
(asyncio streams in a background thread), so clients exercise their actual HTTP stack, and it
holds thousands of concurrent slow requests, which the throughput benchmark relies on.

    with FaultServer(script=["500", "drop"], completion="Down") as server:
        engine = OpenAIEngine(server.base_url, "canned")
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

FAULT_KINDS = ("ok", "500", "429", "drop", "stall", "garbage")

COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")

Completion = str | Callable[[dict[str, Any]], str]


@dataclass
class FaultStats:
    """What the server saw: request count, faults served, peak concurrency, and when.

    ``first_request_at`` and ``last_answer_at`` are ``time.time()`` stamps (None before any),
    comparable with stamps taken in other processes on the same machine.
    """

    requests: int = 0
    served: Counter = field(default_factory=Counter)
    in_flight: int = 0
    max_in_flight: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    first_request_at: float | None = None
    last_answer_at: float | None = None


def _status_line(code: int) -> str:
    reasons = {200: "OK", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}
    return f"HTTP/1.1 {code} {reasons.get(code, 'Error')}"


def _http_response(code: int, body: bytes, extra_headers: Sequence[str] = ()) -> bytes:
    headers = [
        _status_line(code),
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *extra_headers,
    ]
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


def _completion_payload(path: str, text: str, body: dict[str, Any]) -> dict[str, Any]:
    """A minimal OpenAI-shaped answer with one choice (chat or text completion)."""
    pieces = text.split(" ") if text else []
    finish = "stop"
    if path == "/v1/chat/completions":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": p, "logprob": -0.5} for p in pieces]}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish}
        if body.get("logprobs"):
            choice["logprobs"] = {"tokens": pieces, "token_logprobs": [-0.5] * len(pieces)}
        kind = "text_completion"
    usage = {"prompt_tokens": 1, "completion_tokens": len(pieces)}
    return {"id": "canned", "object": kind, "model": body.get("model", ""), "choices": [choice],
            "usage": usage}  # fmt: skip


class FaultServer:
    """Context manager running the misbehaving server on 127.0.0.1 in a daemon thread."""

    def __init__(
        self,
        *,
        script: Sequence[str] = (),
        cycle: bool = False,
        latency_s: float = 0.0,
        stall_s: float = 30.0,
        completion: Completion = "ok",
        record_bodies: bool = False,
    ) -> None:
        unknown = sorted(set(script) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; choose from {FAULT_KINDS}")
        if cycle and not script:
            raise ValueError("cycle=True needs a non-empty script")
        self.script = tuple(script)
        self.cycle = cycle
        self.latency_s = latency_s
        self.stall_s = stall_s
        self.completion = completion
        self.record_bodies = record_bodies
        self.stats = FaultStats()
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> FaultServer:
        if self._thread is not None:
            return self
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="rllm-fault-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout=10):
            raise RuntimeError("fault server did not start")
        return self

    def close(self) -> None:
        if self._thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._thread = None

    async def _shutdown(self) -> None:
        self._server.close()
        for writer in list(self._connections):
            writer.close()
        # Stalled and slow handlers would otherwise die pending when the loop stops.
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await self._server.wait_closed()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- request handling -------------------------------------------------------------------

    def _next_fault(self) -> str:
        index = self.stats.requests
        self.stats.requests += 1
        if self.cycle:
            return self.script[index % len(self.script)]
        return self.script[index] if index < len(self.script) else "ok"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:  # keep-alive: several requests per connection
                request = await _read_request(reader)
                if request is None:
                    return
                if not await self._answer(request, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return  # server shutdown; ending quietly keeps asyncio from logging each handler
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _answer(self, request: tuple[str, str, bytes], writer: asyncio.StreamWriter) -> bool:
        """Write one answer; False when the connection must be dropped."""
        method, path, raw_body = request
        if method == "GET" and path == "/v1/models":
            writer.write(_http_response(200, json.dumps({"data": [{"id": "canned"}]}).encode()))
            await writer.drain()
            return True
        if method != "POST" or path not in COMPLETION_PATHS:
            writer.write(_http_response(404, b'{"error": "not found"}'))
            await writer.drain()
            return True
        if self.stats.first_request_at is None:
            self.stats.first_request_at = time.time()
        fault = self._next_fault()
        self.stats.served[fault] += 1
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            answered = await self._serve_fault(fault, path, raw_body, writer)
        finally:
            self.stats.in_flight -= 1
        self.stats.last_answer_at = time.time()
        return answered

    async def _serve_fault(
        self, fault: str, path: str, raw_body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        if fault == "drop":
            return False
        if fault == "stall":
            await asyncio.sleep(self.stall_s)
            return False
        await asyncio.sleep(self.latency_s)
        if fault == "500":
            writer.write(_http_response(500, b'{"error": {"message": "injected failure"}}'))
        elif fault == "429":
            writer.write(_http_response(429, b'{"error": "slow down"}', ["Retry-After: 0"]))
        elif fault == "garbage":
            writer.write(_http_response(200, b"<html>not json"))
        else:
            body = json.loads(raw_body or b"{}")
            if self.record_bodies:
                self.stats.bodies.append(body)
            text = self.completion(body) if callable(self.completion) else self.completion
            payload = json.dumps(_completion_payload(path, text, body)).encode()
            writer.write(_http_response(200, payload))
        await writer.drain()
        return True


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    """(method, path, body) of the next HTTP/1.1 request, or None when the client hung up."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines[1:] if line)
    }
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return method, path, body
