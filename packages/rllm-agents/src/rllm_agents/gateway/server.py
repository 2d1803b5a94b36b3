"""`Gateway`: an OpenAI-compatible HTTP server in front of a rollout engine, recording sessions.

    async with Gateway(engine) as gateway:
        session = gateway.open_session()
        # hand the program session.base_url as OPENAI_BASE_URL, session.api_key as the key
        ...
        calls = gateway.close_session(session.id)
        sequences, report = build_sequences(calls)

Endpoints, under ``/v1`` (unrecorded) and ``/sessions/<id>/v1`` (recorded to that session):
``POST /chat/completions``, ``POST /completions`` (text or token-id prompts), ``GET /models``.
A request to the plain ``/v1`` URL with an ``X-Rllm-Session: <id>`` header is recorded to that
session too, for programs whose base URL cannot carry a path.

Prompts: when the gateway has a tokenizer (given, or the engine's own ``tokenizer``), it
renders chat messages itself with the tokenizer's chat template and hands the engine token ids,
reusing the model's own tokens of the session's earlier calls where the rendered text continues
them (:mod:`rllm_agents.gateway.prompts`). Without one (an OpenAI engine in chat mode against a
hosted API) messages and tools go to the engine as they are, and the recording holds whatever
token ids the engine reports.

The engine stays the caller's: the gateway neither starts nor closes it.

Every failure becomes an OpenAI error answer with a fitting status (400 for a request the
gateway or engine refuses, 401 for a wrong key, 404 for an unknown or closed session or path,
413 for an oversized body, 500 when the engine fails, 503 while no engine is served), with the
header ``x-should-retry: false`` so the official clients do not resend a request that would
sample again. A request whose client hangs up mid-generation runs to its end and is
recorded (aiohttp does not cancel a handler when its client goes).

Whatever the body, the answer is one of these: a body over ``max_body_bytes`` is refused
from its Content-Length before it is read, one nested deeper than
:data:`~rllm_agents.gateway.json_nesting.MAX_JSON_DEPTH` before it is parsed, and a
``max_tokens`` larger than the model's context (``context_length``: given, or the engine's
own) is refused rather than cut to fit. A client that hangs up before its request is read, or
sends HTTP that does not parse, is logged as one debug line
(:mod:`~rllm_agents.gateway.client_faults`).

``n > 1`` sends n requests to the engine at once (the local engine batches them); a seeded
request gives choice i the seed ``seed + i``. Streaming (``stream: true``) sends the finished
answer as server-sent-event chunks ending with ``data: [DONE]``: the engines return whole
completions, so the chunks come at once after generation.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rllm_agents import json_codec
from rllm_agents.engines.base import (
    ContextOverflow,
    EngineError,
    ModelOutput,
    PromptRejected,
    SamplingParams,
)
from rllm_agents.engines.event_loop import all_or_none
from rllm_agents.gateway import openai_replies as replies
from rllm_agents.gateway import openai_shapes as shapes
from rllm_agents.gateway.answers import chat_choice, text_choice
from rllm_agents.gateway.client_faults import ServerLog, client_gone
from rllm_agents.gateway.openai_replies import Choice
from rllm_agents.gateway.openai_shapes import RequestError, SamplingRequest
from rllm_agents.gateway.prompts import RenderedPrompt, context_after, render_chat_prompt
from rllm_agents.gateway.sessions import GatewaySession, RecordedCall, SessionHost, http_root

log = logging.getLogger(__name__)

SESSION_HEADER = "X-Rllm-Session"
ERROR_HEADERS = {"x-should-retry": "false"}


class Gateway(SessionHost):
    """Serve `engine` over the OpenAI API on `host`:`port` (0: a free port), recording sessions."""

    def __init__(
        self,
        engine: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        model_name: str = "rllm-gateway",
        tokenizer: Any = None,
        max_body_bytes: int = 64 * 1024 * 1024,
        context_length: int | None = None,
    ) -> None:
        self.engine = engine
        self.host = host
        self.port = port
        self.api_key = api_key
        self.model_name = model_name
        self.tokenizer = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
        self.max_body_bytes = max_body_bytes
        # Tokens of prompt and completion together; None: not known, max_tokens goes as asked.
        self.context_length = (
            context_length
            if context_length is not None
            else getattr(engine, "context_length", None)
        )
        self._sessions: dict[str, GatewaySession] = {}
        self._runner: web.AppRunner | None = None
        self._expected_auth = f"Bearer {api_key}".encode() if api_key else None
        # Set by a serving process of GatewayProcesses: reads the session openings its parent
        # has sent, before a request for a session not (yet) known here gets its 404.
        self.before_unknown_session: Callable[[], None] | None = None

    # ---- lifecycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server's root URL, ``http://host:port``."""
        return http_root(self.host, self.port)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL for calls that no session records."""
        return f"{self.url}/v1"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> Gateway:
        if self._runner is not None:
            return self
        app = web.Application(client_max_size=self.max_body_bytes, middlewares=[self._guard])
        for prefix in ("", "/sessions/{session_id}"):
            app.router.add_post(prefix + "/v1/chat/completions", self._chat)
            app.router.add_post(prefix + "/v1/completions", self._completions)
            app.router.add_get(prefix + "/v1/models", self._models)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, logger=ServerLog())
        await runner.setup()
        try:
            # Hundreds of programs connect at once when a run starts; aiohttp's default backlog
            # (128) would drop the rest of the burst's SYNs, which clients resend after 1 s.
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True, backlog=4096)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        """Stop serving (requests in flight are cancelled); the sessions stay readable."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # ---- sessions -------------------------------------------------------------------------------

    def open_session(
        self, session_id: str | None = None, sampling_defaults: dict[str, Any] | None = None
    ) -> GatewaySession:
        """Start recording a new session.

        `sampling_defaults` (OpenAI field names: temperature, top_p, max_tokens, stop, seed)
        apply where a request of this session leaves a setting out.
        """
        if not self.running:
            raise RuntimeError(
                "start the gateway before opening sessions (their URLs need its port)"
            )
        session_id = self._session_id(session_id)
        defaults = shapes.sampling_defaults(sampling_defaults)
        session = self._new_session(session_id, self.url, self.api_key, defaults)
        self._sessions[session_id] = session
        return session

    def session(self, session_id: str) -> GatewaySession:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise KeyError(f"no open session {session_id!r}") from None

    def close_session(self, session_id: str) -> list[RecordedCall]:
        """Stop recording `session_id` and return its calls; later calls to it get a 404."""
        return self._sessions.pop(self.session(session_id).id).close()

    async def aclose_session(self, session_id: str) -> list[RecordedCall]:
        """`close_session`, under the name :class:`GatewayProcesses` shares (it must wait)."""
        return self.close_session(session_id)

    # ---- request plumbing -----------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Authorisation, and every failure as an OpenAI error answer (never a traceback)."""
        try:
            if self._expected_auth is not None and not secrets.compare_digest(
                request.headers.get("Authorization", "").encode(), self._expected_auth
            ):
                raise RequestError(401, "wrong or missing API key", code="invalid_api_key")
            return await handler(request)
        except RequestError as exc:
            return _error_response(exc)
        except web.HTTPException as exc:  # the router's 404 and 405, an oversized body's 413
            if exc.status < 400:
                raise
            message = f"{request.method} {request.path}: {exc.reason}"
            return _error_response(RequestError(exc.status, message))
        except Exception as exc:  # noqa: BLE001 - the client gets an answer, the log the trace
            if client_gone(request, exc):
                log.debug("gateway: %s %s: the client disconnected", request.method, request.path)
                # An answer all the same (aiohttp expects one); nobody is left to read it.
                return _error_response(RequestError(400, "the client disconnected"))
            log.exception("gateway: %s %s failed", request.method, request.path)
            message = f"internal gateway error: {type(exc).__name__}: {exc}"
            return _error_response(RequestError(500, message))

    def _session_of(self, request: web.Request) -> GatewaySession | None:
        session_id = request.match_info.get("session_id") or request.headers.get(SESSION_HEADER)
        if session_id is None:
            return None
        session = self._sessions.get(session_id)
        if session is None and self.before_unknown_session is not None:
            self.before_unknown_session()  # an open message may still wait in a pipe
            session = self._sessions.get(session_id)
        if session is None:
            raise RequestError(
                404,
                f"no open session {session_id!r} (it was closed, or never opened)",
                code="session_not_found",
            )
        return session

    async def _body(self, request: web.Request) -> dict[str, Any]:
        declared = request.content_length
        if declared is not None and declared > self.max_body_bytes:
            raise self._too_large(f" of {declared} bytes")  # before reading any of it
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:  # a body sent without its length
            raise self._too_large() from None
        return shapes.parse_json(raw)

    def _too_large(self, size: str = "") -> RequestError:
        return RequestError(
            413,
            f"the request body{size} is over the limit: the gateway takes at most "
            f"{self.max_body_bytes} bytes",
        )

    async def _generate(self, **call: Any) -> ModelOutput:
        if self.engine is None:
            raise RequestError(503, "no model engine is being served")
        try:
            return await self.engine.generate(**call)
        except ContextOverflow as exc:
            raise RequestError(
                400, str(exc), param="messages", code="context_length_exceeded"
            ) from None
        except PromptRejected as exc:
            raise RequestError(400, f"the model engine refused the request: {exc}") from None
        except EngineError as exc:
            raise RequestError(500, f"the model engine failed: {exc}") from None
        except ValueError as exc:  # the engine's own check of its input (e.g. an empty prompt)
            raise RequestError(400, str(exc)) from None

    async def _generate_all(self, calls: list[dict[str, Any]]) -> list[ModelOutput]:
        """One engine call per choice, concurrently; the first failure cancels the rest."""
        if len(calls) == 1:
            return [await self._generate(**calls[0])]
        return await all_or_none(self._generate(**call) for call in calls)

    def _render(self, chat: shapes.ChatRequest, session: GatewaySession | None) -> RenderedPrompt:
        try:
            return render_chat_prompt(
                self.tokenizer, chat.messages, chat.tools, session.contexts if session else ()
            )
        except Exception as exc:  # noqa: BLE001 - a template error is about these messages
            raise RequestError(
                400,
                f"the chat template cannot render these messages: {type(exc).__name__}: {exc}",
                param="messages",
            ) from None

    def _encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, list):
            return self._in_vocabulary(prompt)
        if self.tokenizer is None:
            raise RequestError(
                400,
                "prompt: this gateway has no tokenizer, so it takes token-id prompts only",
                param="prompt",
            )
        try:
            return list(self.tokenizer.encode(prompt))
        except Exception as exc:  # noqa: BLE001 - e.g. a lone surrogate, which UTF-8 cannot hold
            raise RequestError(
                400,
                f"prompt: the tokenizer cannot encode it: {type(exc).__name__}: {exc}",
                param="prompt",
            ) from None

    def _in_vocabulary(self, ids: list[int]) -> list[int]:
        """`ids`, refused when one is no token of the tokenizer (if the gateway has one). The
        engine would index its embedding table with it and fail - together with the prompts
        admitted beside it, and on a GPU with a device-side assert that ends the process."""
        if self.tokenizer is not None and max(ids) >= len(self.tokenizer):
            raise RequestError(
                400,
                f"prompt: token id {max(ids)} is not in the model's vocabulary "
                f"(0 to {len(self.tokenizer) - 1})",
                param="prompt",
            )
        return ids

    # ---- endpoints ------------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        call = _Call.arrive(self._session_of(request))
        prompt: RenderedPrompt | None = None
        with call.counting_failure():  # a refused request is a failed call of the session too
            chat = shapes.parse_chat(await self._body(request), self.context_length)
            params = call.sampling(chat.sampling, chat.n)
            if self.tokenizer is not None:
                prompt = self._render(chat, call.session)
                engine_calls = [{"prompt_ids": prompt.ids, "sampling": p} for p in params]
            else:
                engine_calls = [
                    {"messages": chat.messages, "tools": chat.tools, "sampling": p} for p in params
                ]
            outputs = await self._generate_all(engine_calls)
        parse_tools = bool(chat.tools) and chat.tool_choice != "none"
        choices = [
            chat_choice(
                output, parse_tools=parse_tools, tokenizer=self.tokenizer, token_texts=chat.logprobs
            )
            for output in outputs
        ]
        call.record(
            choices, engine_calls, "chat", chat.messages, chat.tools, prompt, self.tokenizer
        )
        request_id = "chatcmpl-" + uuid.uuid4().hex
        if chat.stream:
            chunks = replies.chat_chunks(request_id, self.model_name, chat, choices)
            return await _stream(request, chunks)
        return _json_response(replies.chat_completion(request_id, self.model_name, chat, choices))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        call = _Call.arrive(self._session_of(request))
        with call.counting_failure():
            completion = shapes.parse_completion(await self._body(request), self.context_length)
            params = call.sampling(completion.sampling, completion.n)
            prompts = [self._encode(prompt) for prompt in completion.prompts]
            engine_calls = [{"prompt_ids": ids, "sampling": p} for ids in prompts for p in params]
            outputs = await self._generate_all(engine_calls)
        want_texts = completion.logprobs is not None
        choices = [
            text_choice(o, tokenizer=self.tokenizer, token_texts=want_texts) for o in outputs
        ]
        call.record(choices, engine_calls, "completions")
        request_id = "cmpl-" + uuid.uuid4().hex
        if completion.stream:
            chunks = replies.completion_chunks(request_id, self.model_name, completion, choices)
            return await _stream(request, chunks)
        return _json_response(
            replies.text_completion(request_id, self.model_name, completion, choices)
        )

    async def _models(self, request: web.Request) -> web.StreamResponse:
        self._session_of(request)  # an unknown session is a 404 here too
        return _json_response(replies.models_list(self.model_name))


@dataclass
class _Call:
    """One request being served: the session it records to (if any) and when it arrived."""

    session: GatewaySession | None
    index: int = 0
    started: float = field(default_factory=time.time)
    clock: float = field(default_factory=time.perf_counter)

    @classmethod
    def arrive(cls, session: GatewaySession | None) -> _Call:
        # The index is taken on arrival, so concurrent calls keep their arrival order.
        return cls(session, session.next_index() if session is not None else 0)

    def sampling(self, request: SamplingRequest, n: int) -> list[SamplingParams]:
        """The engine settings of each of the n choices."""
        defaults = self.session.sampling_defaults if self.session is not None else None
        return [request.with_seed_offset(i).resolve(defaults) for i in range(n)]

    @contextlib.contextmanager
    def counting_failure(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            if self.session is not None:
                self.session.failed_calls += 1
            raise

    def record(
        self,
        choices: list[Choice],
        engine_calls: list[dict[str, Any]],
        endpoint: str,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        prompt: RenderedPrompt | None = None,
        tokenizer: Any = None,
    ) -> None:
        """Record each choice with the prompt ids its engine call was given."""
        if self.session is None:
            return
        latency = time.perf_counter() - self.clock
        for choice_index, (choice, engine_call) in enumerate(
            zip(choices, engine_calls, strict=True)
        ):
            output = choice.output
            completion_ids = list(output.completion_ids)
            recorded = RecordedCall(
                index=self.index,
                messages=messages,
                tools=tools,
                prompt_ids=list(engine_call.get("prompt_ids") or output.prompt_ids),
                completion_ids=completion_ids,
                logprobs=list(output.logprobs),
                text=output.text,
                tool_calls=choice.tool_calls,
                finish_reason=choice.finish_reason,
                sampling=dict(vars(engine_call["sampling"])),
                started=self.started,
                latency_s=latency,
                choice_index=choice_index,
                endpoint=endpoint,
                extends=prompt.extends if prompt is not None else None,
            )
            context = None
            if prompt is not None:
                context = context_after(tokenizer, self.index, prompt, completion_ids)
            self.session.record(recorded, context)


def _json_response(data: dict[str, Any], status: int = 200, headers: Any = None) -> web.Response:
    return web.Response(
        body=json_codec.dumps(data), status=status, content_type="application/json", headers=headers
    )


def _error_response(error: RequestError) -> web.Response:
    return _json_response(error.body(), status=error.status, headers=ERROR_HEADERS)


async def _stream(request: web.Request, chunks: list[dict[str, Any]]) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    await response.write(
        b"".join(b"data: " + json_codec.dumps(chunk) + b"\n\n" for chunk in chunks)
    )
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
