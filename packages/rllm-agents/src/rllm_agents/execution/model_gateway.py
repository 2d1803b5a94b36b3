"""`ModelGateway`: a rollout engine of this process, served to Ray workers over HTTP.

When episodes run on other machines but the model lives in the driver - the trainer's
``LocalEngine`` sampling from the weights being trained, or the embedded model of
``rllm-eval`` - the workers need a URL to call. The gateway answers the two OpenAI endpoints
the workers' :class:`~rllm_agents.engines.openai.OpenAIEngine` uses, by calling the engine:

* ``POST /v1/completions`` with a token-id prompt (token-level rendering): the answer carries
  the completion's ``token_ids`` and ``logprobs``, exactly what the engine returned, so a
  trainer gets the same tokens as from an in-process run.
* ``POST /v1/chat/completions`` with messages (and tools): text, tool calls, token ids and
  logprobs likewise.

Sampling settings travel as the OpenAI fields (temperature, top_p, max_tokens, stop, seed,
logprobs). The gateway listens on this node's cluster address and asks for a random bearer
key, which only the workers' setup carries. It runs on the driver's event loop for the
length of a run and keeps its port across runs, so the workers' setup does not change.
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import asdict
from typing import Any

from rllm_agents.engines.base import ModelOutput, SamplingParams

MODEL_NAME = "rllm-gateway"


class ModelGateway:
    def __init__(self, host: str | None = None, port: int = 0) -> None:
        self.host = host
        self.port = port
        self.api_key = secrets.token_urlsafe(24)
        self._engine: Any = None
        self._runner: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def client(self) -> Any:
        """The engine a worker uses to reach this gateway."""
        from rllm_agents.engines.openai import OpenAIEngine

        # A CPU model under load can take minutes per answer; the worker must not give up
        # and resend (each resend samples again).
        return OpenAIEngine(
            self.base_url, MODEL_NAME, api_key=self.api_key, timeout=3600, max_retries=2
        )

    async def start(self, engine: Any) -> None:
        """Serve `engine` on the running event loop (the same port as last time if free)."""
        from aiohttp import web

        await self.stop()
        self._engine = engine
        if self.host is None:
            import ray

            self.host = ray.util.get_node_ip_address()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        if not self.port or not _port_free(self.host, self.port):
            self.port = _free_port(self.host)
        await web.TCPSite(self._runner, self.host, self.port, reuse_address=True).start()

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self._engine = None

    # ---- endpoints --------------------------------------------------------------------------
    async def _completions(self, request: Any) -> Any:
        body, refusal = await self._body(request)
        if refusal is not None:
            return refusal
        prompt = body.get("prompt")
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            return _error(400, "prompt: the gateway takes token-id prompts only")
        output = await self._engine.generate(prompt_ids=prompt, sampling=_sampling(body))
        choice = {
            "index": 0,
            "text": output.text,
            "finish_reason": output.finish_reason,
            "token_ids": list(output.completion_ids),
            "logprobs": {"token_logprobs": list(output.logprobs)},
        }
        return _answer("text_completion", choice, output)

    async def _chat(self, request: Any) -> Any:
        body, refusal = await self._body(request)
        if refusal is not None:
            return refusal
        if not isinstance(body.get("messages"), list):
            return _error(400, "messages: expected a list of chat messages")
        output = await self._engine.generate(
            body["messages"], sampling=_sampling(body), tools=body.get("tools")
        )
        message = {"role": "assistant", "content": output.text, "tool_calls": output.tool_calls}
        if output.reasoning is not None:
            message["reasoning_content"] = output.reasoning
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": output.finish_reason,
            "token_ids": list(output.completion_ids),
            "logprobs": {"content": [{"logprob": value} for value in output.logprobs]},
        }
        return _answer("chat.completion", choice, output)

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        if not self._authorised(request):
            return _error(401, "wrong or missing API key")
        return web.json_response({"object": "list", "data": [{"id": MODEL_NAME}]})

    async def _body(self, request: Any) -> tuple[dict[str, Any], Any]:
        if not self._authorised(request):
            return {}, _error(401, "wrong or missing API key")
        if self._engine is None:
            return {}, _error(503, "no engine is being served")
        try:
            body = await request.json()
        except ValueError:
            return {}, _error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return {}, _error(400, "the body must be a JSON object")
        return body, None

    def _authorised(self, request: Any) -> bool:
        given = request.headers.get("Authorization", "")
        return secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode())


def _sampling(body: dict[str, Any]) -> SamplingParams:
    defaults = asdict(SamplingParams())
    stop = body.get("stop") or ()
    return SamplingParams(
        temperature=float(body.get("temperature", defaults["temperature"])),
        top_p=float(body.get("top_p", defaults["top_p"])),
        max_tokens=int(body.get("max_tokens") or defaults["max_tokens"]),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        seed=body.get("seed"),
        logprobs=bool(body.get("logprobs", False)),
    )


def _answer(kind: str, choice: dict[str, Any], output: ModelOutput) -> Any:
    from aiohttp import web

    return web.json_response(
        {
            "object": kind,
            "model": MODEL_NAME,
            "choices": [choice],
            "prompt_token_ids": list(output.prompt_ids),
            "usage": {
                "prompt_tokens": output.prompt_length,
                "completion_tokens": output.completion_length,
            },
        }
    )


def _error(status: int, message: str) -> Any:
    from aiohttp import web

    return web.json_response({"error": {"message": message}}, status=status)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
