"""`ModelGateway`: a rollout engine of this process, served to Ray workers over HTTP.

When episodes run on other machines but the model lives in the driver - the trainer's
``LocalEngine`` sampling from the weights being trained, or the embedded model of
``rllm-eval`` - the workers need a URL to call. This is the project's
:class:`~rllm_agents.gateway.Gateway` set up for them: it listens on this node's cluster
address, asks for a random bearer key that only the workers' setup carries, and the workers'
:class:`~rllm_agents.engines.openai.OpenAIEngine` calls its unrecorded ``/v1`` endpoints:

* ``POST /v1/completions`` with a token-id prompt (token-level rendering): the answer carries
  the completion's ``token_ids`` and ``logprobs``, exactly what the engine returned, so a
  trainer gets the same tokens as from an in-process run.
* ``POST /v1/chat/completions`` with messages (and tools): text, tool calls, token ids and
  logprobs likewise.

It runs on the driver's event loop for the length of a run and keeps its port across runs
(when still free), so the workers' setup does not change.
"""

from __future__ import annotations

import secrets
import socket
from typing import Any

MODEL_NAME = "rllm-gateway"


class ModelGateway:
    def __init__(self, host: str | None = None, port: int = 0) -> None:
        self.host = host
        self.port = port
        self.api_key = secrets.token_urlsafe(24)
        self._gateway: Any = None

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
        from rllm_agents.gateway import Gateway

        await self.stop()
        if self.host is None:
            import ray

            self.host = ray.util.get_node_ip_address()
        port = self.port if self.port and _port_free(self.host, self.port) else 0
        gateway = Gateway(
            engine, host=self.host, port=port, api_key=self.api_key, model_name=MODEL_NAME
        )
        await gateway.start()
        self._gateway = gateway
        self.port = gateway.port

    async def stop(self) -> None:
        gateway, self._gateway = self._gateway, None
        if gateway is not None:
            await gateway.stop()


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
