"""An engine for any OpenAI-compatible HTTP server (vLLM, SGLang, llama.cpp, hosted APIs).

- ``messages`` go to ``/chat/completions`` (or, with ``use_completions=True`` and a tokenizer,
  are rendered with the tokenizer's chat template and sent to ``/completions``).
- ``prompt_ids`` go to ``/completions`` as a token-list prompt, which vLLM and SGLang accept.
  Servers that reject it (llama.cpp's Python server validates ``prompt`` as a string) get the
  prompt detokenised with ``tokenizer`` instead; the engine remembers that and logs it once.
- Token ids: taken from the server when it returns them (vLLM's ``token_ids`` /
  ``prompt_token_ids`` with ``return_token_ids``); otherwise, with a tokenizer, the completion
  text is re-tokenised (plus EOS when the server stopped on it). Re-tokenised ids may differ
  from what the server sampled; logprobs are kept only when their count matches the ids.
- Logprobs are whatever the server reports (vLLM: of the raw model distribution by default;
  llama.cpp: of the distribution after its samplers' temperature).
- 429, 5xx, connection errors, dropped connections and timeouts are retried with exponential
  backoff and full jitter (``Retry-After`` honoured, capped); after the last try the call raises
  ``EngineError`` naming the last cause. Other 4xx errors are not retried; 400, 413 and 422
  raise ``PromptRejected`` (``ContextOverflow`` when the server says the prompt is too long).

The transport is aiohttp: one ``ClientSession`` per event loop, made on first use, whose
keep-alive connections (at most ``max_connections`` at once) are shared by every request.
``timeout`` bounds one attempt, waiting for a free connection included. With
``max_concurrency`` (a server that answers that many requests at once, such as
llama-cpp-python's with 1) at most that many requests are in flight at the server; the rest
wait in the engine, off the clock of ``timeout``, and report the wait as
``ModelOutput.queue_time`` (:mod:`rllm_agents.engines.slots`). HTTPS is verified
against the system's CAs unless ``ssl_context`` is given; a certificate the client does not
trust fails at once (retrying cannot fix it). Proxies from the environment are not used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from rllm_agents import json_codec
from rllm_agents.chat.tito import render_prompt_ids
from rllm_agents.engines import openai_scoring
from rllm_agents.engines.base import (
    ContextOverflow,
    EngineError,
    ModelOutput,
    PromptRejected,
    SamplingParams,
)
from rllm_agents.engines.prompting import check_one_prompt
from rllm_agents.engines.scoring import checked_request
from rllm_agents.engines.slots import ServingSlots

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
# Answers that blame the request itself (raised as PromptRejected, so a gateway in front of
# this engine can pass them on as the client's error).
REJECTION_STATUS = frozenset({400, 413, 422})
# How model servers word a prompt that is longer than the context window.
CONTEXT_OVERFLOW_HINTS = ("context_length_exceeded", "maximum context length", "context window")


class _Retryable(Exception):
    """A failure worth another try (server overload, dropped connection, timeout)."""


class _TokenPromptRejected(Exception):
    """The server does not take a token-list prompt."""


class OpenAIEngine:
    """RolloutEngine over the OpenAI HTTP API (chat and completions endpoints)."""

    # A copy in another process reaches the same server (GatewayProcesses serves from copies).
    serves_from_any_process = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60,
        max_retries: int = 5,
        use_completions: bool = False,
        tokenizer: Any = None,
        backoff_base_s: float = 0.25,
        backoff_max_s: float = 8.0,
        max_connections: int = 512,
        extra_body: dict[str, Any] | None = None,
        seed: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        if use_completions and tokenizer is None:
            raise ValueError("use_completions=True needs a tokenizer to render chat messages")
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_retries = max_retries
        self.use_completions = use_completions
        self.tokenizer = tokenizer
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.extra_body = dict(extra_body or {})
        self.token_prompts_supported: bool | None = None  # learnt on first token prompt
        self._scoring_ask = 0  # openai_scoring.ASKS' first the server answers, learnt on use
        self._jitter = random.Random(seed)
        self._headers = {**headers, "Content-Type": "application/json"}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._max_connections = max_connections
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        # Parsed once: aiohttp would otherwise parse the URL string on every request.
        self._urls = {
            path: URL(self.base_url + path) for path in ("/chat/completions", "/completions")
        }
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self.slots = ServingSlots(max_concurrency) if max_concurrency else None

    @property
    def serving_slots(self) -> int | None:
        """Requests in flight at the server at most (None: no limit set)."""
        return self.slots.count if self.slots is not None else None

    # ---- public API -------------------------------------------------------------------------

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        sampling = sampling or SamplingParams()
        check_one_prompt(messages, prompt_ids)
        if prompt_ids is not None:
            return await self._complete_ids(list(prompt_ids), sampling)
        if self.use_completions:
            ids = render_prompt_ids(self.tokenizer, messages, tools)
            return await self._complete_ids(ids, sampling)
        return await self._chat(messages, sampling, tools)

    async def served_models(self) -> list[str] | None:
        """The model names the server lists at ``/models``; None when it lists none.

        A quick check before a run: raises EngineError when the server cannot be reached or
        refuses the API key, so a bad ``base_url`` fails at once instead of once per request.
        """
        session = await self._session_for_this_loop()
        timeout = aiohttp.ClientTimeout(total=min(self._timeout.total or 10.0, 10.0))
        try:
            async with session.get(self.base_url + "/models", timeout=timeout) as response:
                status, raw = response.status, await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise EngineError(
                f"cannot reach the model server at {self.base_url}: {reason}"
            ) from exc
        if status in (401, 403):
            raise EngineError(f"{self.base_url} refused the API key (HTTP {status})")
        try:
            return (
                [str(model["id"]) for model in json.loads(raw)["data"]] if status == 200 else None
            )
        except (ValueError, KeyError, TypeError):
            return None  # not an OpenAI model listing: nothing to check against

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process (a Ray worker's) opens its own session on its own loop.
        return {**self.__dict__, "_session": None, "_session_loop": None}

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def _session_for_this_loop(self) -> aiohttp.ClientSession:
        # A session belongs to the event loop it was made on; callers such as a blocking
        # `run()` helper may use the engine from successive loops.
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            if self._session is not None:
                await _let_go(self._session, self._session_loop)
            connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=self._ssl)
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=self._timeout, connector=connector
            )
            self._session_loop = loop
        return self._session

    # ---- endpoints --------------------------------------------------------------------------

    async def _chat(self, messages: list[dict[str, Any]], sampling: SamplingParams, tools: Any):
        body = {**sampling.request_fields(), "model": self.model, "messages": messages}
        if sampling.logprobs:
            body["logprobs"] = True
        if tools:
            body["tools"] = tools
        data, queued = await self._post("/chat/completions", {**body, **self.extra_body})
        choice = _first_choice(data)
        message = choice.get("message") or {}
        logprobs = [
            entry.get("logprob", 0.0)
            for entry in ((choice.get("logprobs") or {}).get("content") or [])
        ]
        output = ModelOutput(
            text=message.get("content") or "",
            finish_reason=choice.get("finish_reason") or "stop",
            tool_calls=list(message.get("tool_calls") or []),
            reasoning=message.get("reasoning_content") or message.get("reasoning"),
            queue_time=queued,
        )
        return self._attach_tokens(output, data, choice, logprobs, sampling)

    async def _complete_ids(self, prompt_ids: list[int], sampling: SamplingParams) -> ModelOutput:
        body = {**sampling.request_fields(), "model": self.model}
        if sampling.logprobs:
            body["logprobs"] = 1
        data, queued, _ = await self._post_prompt(prompt_ids, body)
        choice = _first_choice(data)
        logprobs = list((choice.get("logprobs") or {}).get("token_logprobs") or [])
        output = ModelOutput(
            text=choice.get("text") or "",
            finish_reason=choice.get("finish_reason") or "stop",
            prompt_ids=list(prompt_ids),
            queue_time=queued,
        )
        return self._attach_tokens(output, data, choice, logprobs, sampling)

    async def _post_prompt(
        self, prompt_ids: list[int], body: dict[str, Any]
    ) -> tuple[dict[str, Any], float, bool]:
        """``/completions`` with `prompt_ids` as the prompt: token ids where the server takes
        them, else the detokenised text. (answer, seconds queued, whether it went as text)."""
        if self.token_prompts_supported is not False:
            # Only until the server has taken one: after that a refusal that names the prompt
            # (vLLM's "maximum context length ... in the prompt") is that request's own fault,
            # and switching every later request to text would lose the token ids.
            learning = self.token_prompts_supported is None
            try:
                data, queued = await self._post(
                    "/completions", {**body, "prompt": prompt_ids, **self.extra_body}, learning
                )
                self.token_prompts_supported = True
                return data, queued, False
            except _TokenPromptRejected:
                if self.tokenizer is None:
                    raise EngineError(
                        f"{self.base_url} does not accept token-id prompts; pass tokenizer= "
                        "so the engine can send the detokenised prompt instead"
                    ) from None
                self.token_prompts_supported = False
                log.warning(
                    "%s rejects token-id prompts; sending detokenised text prompts", self.base_url
                )
        text = self.tokenizer.decode(
            prompt_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        data, queued = await self._post("/completions", {**body, "prompt": text, **self.extra_body})
        return data, queued, True

    async def prompt_logprobs(self, token_ids: Sequence[int], start: int = 1) -> list[float | None]:
        """The served model's log-prob of each given token from `start` on (engines/scoring.py),
        asked for as the server answers it (engines/openai_scoring.py: the prompt's echo, or
        vLLM's prompt_logprobs). None where the server gives none."""
        ids = checked_request(token_ids, start)
        for ask in openai_scoring.ASKS[self._scoring_ask :]:
            data, _, as_text = await self._post_prompt(ids, {"model": self.model, **ask})
            text = openai_scoring.TextPrompt.of(self.tokenizer, ids) if as_text else None
            values = openai_scoring.answered_logprobs(_first_choice(data), ids, text)
            if values is not None:
                return values[start:]
            self._scoring_ask += 1  # this server does not answer that ask: the next one
        self._scoring_ask = 0  # perhaps another model of the same server answers
        raise openai_scoring.no_logprobs_error(self.base_url, self.model)

    def _attach_tokens(
        self,
        output: ModelOutput,
        data: dict[str, Any],
        choice: dict[str, Any],
        logprobs: list[float | None],
        sampling: SamplingParams,
    ) -> ModelOutput:
        usage = data.get("usage")
        if isinstance(usage, dict):
            output.usage = {k: v for k, v in usage.items() if isinstance(v, int)}
        server_prompt_ids = choice.get("prompt_token_ids") or data.get("prompt_token_ids")
        if server_prompt_ids:
            output.prompt_ids = list(server_prompt_ids)
        server_ids = choice.get("token_ids")
        if server_ids is not None:
            output.completion_ids = list(server_ids)
        elif self.tokenizer is not None:
            output.completion_ids = self._retokenise(output, sampling)
        clean = [float(lp) if lp is not None else 0.0 for lp in logprobs]
        if sampling.logprobs and len(clean) == len(output.completion_ids):
            output.logprobs = clean
        elif sampling.logprobs and not output.completion_ids:
            output.logprobs = clean  # no ids known: logprobs still describe the text
        return output

    def _retokenise(self, output: ModelOutput, sampling: SamplingParams) -> list[int]:
        ids = list(self.tokenizer.encode(output.text, add_special_tokens=False))
        stopped_on_eos = output.finish_reason == "stop" and not sampling.stop
        if stopped_on_eos and self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return ids

    # ---- transport with retries -------------------------------------------------------------

    async def _post(
        self, path: str, body: dict[str, Any], token_prompt: bool = False
    ) -> tuple[dict, float]:
        """The server's answer, and the seconds spent waiting for a serving slot."""
        last_error = "no attempt made"
        payload = json_codec.dumps(body)
        url = self._urls.get(path) or URL(self.base_url + path)
        queued = 0.0
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            try:
                status, retry_header, raw, waited = await self._send_in_a_slot(url, payload)
                queued += waited
                if status == 200:
                    return _json_body(raw), queued
                text = raw.decode("utf-8", "replace")
                if token_prompt and _rejects_token_prompt(status, text):
                    raise _TokenPromptRejected()
                last_error = f"HTTP {status}: {text[:300]}"
                if status not in RETRY_STATUS:
                    raise _refusal(status, text)(f"{self.base_url}{path} failed: {last_error}")
                retry_after = _retry_after_s(retry_header)
            except asyncio.TimeoutError as exc:
                last_error = f"timeout ({type(exc).__name__})"
            except aiohttp.ClientConnectorCertificateError as exc:
                raise EngineError(f"{self.base_url}: {exc}") from exc  # will not heal by retrying
            except aiohttp.ClientError as exc:  # refused, reset, dropped mid-answer, malformed
                last_error = f"connection error ({type(exc).__name__}: {exc})"
            except _Retryable as exc:
                last_error = str(exc)
            if attempt < self.max_retries:
                await asyncio.sleep(self._backoff_s(attempt, retry_after))
        raise EngineError(
            f"{self.base_url}{path} failed after {self.max_retries + 1} attempts: {last_error}"
        )

    async def _send_in_a_slot(
        self, url: URL, payload: bytes
    ) -> tuple[int, str | None, bytes, float]:
        """One POST, sent once a serving slot is free (the slot is let go between retries, so
        a backoff does not keep others waiting); the wait is off the attempt's timeout."""
        if self.slots is None:
            return (*await self._send(url, payload), 0.0)
        async with self.slots.hold() as lease:
            return (*await self._send(url, payload), lease.queued_s)

    async def _send(self, url: URL, payload: bytes) -> tuple[int, str | None, bytes]:
        """(status, Retry-After header, body) of one POST."""
        session = await self._session_for_this_loop()
        async with session.post(url, data=payload) as response:
            return response.status, response.headers.get("Retry-After"), await response.read()

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        delay = self._jitter.uniform(0, ceiling)  # full jitter spreads out retry storms
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max_s))
        return delay


def _json_body(raw: bytes) -> dict[str, Any]:
    try:
        data = json_codec.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError included
        snippet = raw[:200].decode("utf-8", "replace")
        raise _Retryable(f"invalid JSON from server: {snippet!r}") from exc
    if not isinstance(data, dict) or not data.get("choices"):
        raise _Retryable(f"response without choices: {str(data)[:200]}")
    return data


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    return data["choices"][0]


def _rejects_token_prompt(status: int, text: str) -> bool:
    # vLLM answers 400 for malformed bodies; llama.cpp's server wraps its pydantic
    # validation error in a 500 that names the `prompt` field.
    if status in (400, 422):
        return "prompt" in text
    return status == 500 and "'prompt'" in text and "valid" in text


def _refusal(status: int, text: str) -> type[EngineError]:
    """The error kind of a non-retryable answer: the request's fault or the server's."""
    if status not in REJECTION_STATUS:
        return EngineError
    lowered = text.lower()
    return ContextOverflow if any(h in lowered for h in CONTEXT_OVERFLOW_HINTS) else PromptRejected


def _retry_after_s(header: str | None) -> float | None:
    try:
        return float(header or "")
    except ValueError:
        return None


async def _let_go(session: aiohttp.ClientSession, loop: asyncio.AbstractEventLoop | None) -> None:
    """Close a session made on another event loop, from this one, without touching that loop."""
    if session.closed:
        return
    if loop is not None and loop.is_running():
        asyncio.run_coroutine_threadsafe(session.close(), loop)  # that loop closes its own
        return
    connector = session.connector
    session.detach()  # now counts as closed: nothing is logged when it is collected
    if connector is not None and loop is not None and loop.is_closed():
        # With its loop gone, closing only marks it closed; its sockets go with the objects.
        await connector.close()
