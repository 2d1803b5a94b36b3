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
  ``EngineError`` naming the last cause. Other 4xx errors are not retried.

The transport is :class:`~rllm_agents.engines.http_pool.HttpPool`, keep-alive HTTP/1.1 made
for this traffic: with hundreds of agents on one server, general-purpose clients cost several
times its CPU per request (httpx held 256 concurrent 0.5 s requests to about 15 % of the
server's throughput; aiohttp kept up but cost 3x the CPU; see benchmarks/engine_throughput.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
from typing import Any

from rllm_agents.chat.tito import render_prompt_ids
from rllm_agents.engines.base import EngineError, ModelOutput, SamplingParams
from rllm_agents.engines.http_pool import HttpPool, HttpTransportError
from rllm_agents.engines.prompting import check_one_prompt

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class _Retryable(Exception):
    """A failure worth another try (server overload, dropped connection, timeout)."""


class _TokenPromptRejected(Exception):
    """The server does not take a token-list prompt."""


class OpenAIEngine:
    """RolloutEngine over the OpenAI HTTP API (chat and completions endpoints)."""

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
    ) -> None:
        if use_completions and tokenizer is None:
            raise ValueError("use_completions=True needs a tokenizer to render chat messages")
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
        self._jitter = random.Random(seed)
        self._headers = headers
        self._timeout = timeout
        self._max_connections = max_connections
        self._ssl_context = ssl_context
        self._pool: HttpPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None

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

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()

    def _pool_for_this_loop(self) -> HttpPool:
        # Connections belong to the event loop they were made on; callers such as a blocking
        # `run()` helper may use the engine from successive loops.
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool.closed or self._pool_loop is not loop:
            self._pool = HttpPool(
                self.base_url, self._headers, self._max_connections, self._ssl_context
            )
            self._pool_loop = loop
        return self._pool

    # ---- endpoints --------------------------------------------------------------------------

    async def _chat(self, messages: list[dict[str, Any]], sampling: SamplingParams, tools: Any):
        body = {**_sampling_body(sampling), "model": self.model, "messages": messages}
        if sampling.logprobs:
            body["logprobs"] = True
        if tools:
            body["tools"] = tools
        data = await self._post("/chat/completions", {**body, **self.extra_body})
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
        )
        return self._attach_tokens(output, data, choice, logprobs, sampling)

    async def _complete_ids(self, prompt_ids: list[int], sampling: SamplingParams) -> ModelOutput:
        if self.token_prompts_supported is not False:
            try:
                output = await self._completions(prompt_ids, prompt_ids, sampling)
                self.token_prompts_supported = True
                return output
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
        return await self._completions(text, prompt_ids, sampling)

    async def _completions(
        self, prompt: str | list[int], prompt_ids: list[int], sampling: SamplingParams
    ) -> ModelOutput:
        body = {**_sampling_body(sampling), "model": self.model, "prompt": prompt}
        if sampling.logprobs:
            body["logprobs"] = 1
        data = await self._post(
            "/completions", {**body, **self.extra_body}, token_prompt=isinstance(prompt, list)
        )
        choice = _first_choice(data)
        logprobs = list((choice.get("logprobs") or {}).get("token_logprobs") or [])
        output = ModelOutput(
            text=choice.get("text") or "",
            finish_reason=choice.get("finish_reason") or "stop",
            prompt_ids=list(prompt_ids),
        )
        return self._attach_tokens(output, data, choice, logprobs, sampling)

    def _attach_tokens(
        self,
        output: ModelOutput,
        data: dict[str, Any],
        choice: dict[str, Any],
        logprobs: list[float | None],
        sampling: SamplingParams,
    ) -> ModelOutput:
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

    async def _post(self, path: str, body: dict[str, Any], token_prompt: bool = False) -> dict:
        last_error = "no attempt made"
        payload = json.dumps(body).encode()
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            try:
                pool = self._pool_for_this_loop()
                response = await pool.post_json(path, payload, self._timeout)
                text = response.body.decode("utf-8", "replace")
                if response.status == 200:
                    return _json_body(text)
                if token_prompt and _rejects_token_prompt(response.status, text):
                    raise _TokenPromptRejected()
                last_error = f"HTTP {response.status}: {text[:300]}"
                if response.status not in RETRY_STATUS:
                    raise EngineError(f"{self.base_url}{path} failed: {last_error}")
                retry_after = _retry_after_s(response.headers.get("retry-after"))
            except asyncio.TimeoutError as exc:
                last_error = f"timeout ({type(exc).__name__})"
            except HttpTransportError as exc:  # refused, reset, dropped mid-response
                last_error = f"connection error ({exc})"
            except _Retryable as exc:
                last_error = str(exc)
            if attempt < self.max_retries:
                await asyncio.sleep(self._backoff_s(attempt, retry_after))
        raise EngineError(
            f"{self.base_url}{path} failed after {self.max_retries + 1} attempts: {last_error}"
        )

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        delay = self._jitter.uniform(0, ceiling)  # full jitter spreads out retry storms
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max_s))
        return delay


def _sampling_body(sampling: SamplingParams) -> dict[str, Any]:
    body: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
    }
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    return body


def _json_body(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _Retryable(f"invalid JSON from server: {text[:200]!r}") from exc
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


def _retry_after_s(header: str | None) -> float | None:
    try:
        return float(header or "")
    except ValueError:
        return None
