"""vLLM's OpenAI server as a child process of the run, and an engine that talks to it
token-in/token-out and changes its weights through vLLM's RL endpoints.

``VLLMServer`` runs ``python -m vllm.entrypoints.openai.api_server`` on a free loopback port
with the same settings as the in-process engine (vllm_config.VLLMSettings) and dies with its
owner (engines/child_server.py: its own process group, the parent-death signal, and the
reaper for the engine core and workers vLLM starts). Its development endpoints are switched
on (``VLLM_SERVER_DEV_MODE``: ``/pause``, ``/resume``, ``/collective_rpc``,
``/reset_prefix_cache``); the server listens on 127.0.0.1 only.

``VLLMServerEngine`` renders chats with the model's template and sends token ids to
``/v1/completions`` with ``return_token_ids``, so the ids, their text and one log-prob per
token come back as vLLM sampled them (engines/openai.py). Weight syncs and LoRA adapters go
through the same policy logic as the in-process engine (vllm_policy.PolicyState), with
``ServerControl`` doing vLLM's part over HTTP.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import httpx

from rllm_agents.engines.base import EngineError, ModelOutput, SamplingParams
from rllm_agents.engines.child_server import ChildServer
from rllm_agents.engines.loop_thread import LoopThread
from rllm_agents.engines.vllm.config import VLLMSettings, cli_args, environment_for
from rllm_agents.engines.vllm.front import VLLMFront

CONTROL_TIMEOUT_S = 600.0  # a pause waits for running requests; a load may take a while


class VLLMServer(ChildServer):
    """One vLLM OpenAI server process, owned by this object."""

    kind = "vLLM server"
    watch_descendants = True  # its engine core and workers are its own children

    def __init__(
        self,
        model: str = "smollm2",
        *,
        settings: VLLMSettings | None = None,
        served_name: str | None = None,
        port: int | None = None,
        startup_timeout_s: float = 600.0,
        **overrides: Any,
    ) -> None:
        super().__init__(port=port, startup_timeout_s=startup_timeout_s)
        from rllm_agents.models import resolve_model

        self.model_dir = str(resolve_model(model))
        self.served_name = served_name or os.path.basename(model.rstrip("/")) or "model"
        self.settings = (settings or VLLMSettings.for_this_machine()).replace(**overrides)

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model_dir,
            "--served-model-name", self.served_name,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            *cli_args(self.settings.engine_args()),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        wanted = {
            "VLLM_SERVER_DEV_MODE": "1",  # the RL endpoints (loopback only, see above)
            "VLLM_LOGGING_LEVEL": "WARNING",
            **environment_for(self.settings),
        }
        if self.settings.enable_lora:
            wanted["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
        return {**wanted, **os.environ} | {"VLLM_SERVER_DEV_MODE": "1"}

    def check(self) -> None:
        if importlib.util.find_spec("vllm") is None:
            from rllm_agents.engines.vllm.engine import INSTALL_HINT

            raise ImportError(f"the vLLM server needs vllm: {INSTALL_HINT}")


class ServerControl:
    """The parts of vLLM's engine API the policy logic calls, done over the server's HTTP
    endpoints (used on the engine's loop only)."""

    def __init__(self, root_url: str) -> None:
        self._client = httpx.AsyncClient(base_url=root_url, timeout=CONTROL_TIMEOUT_S)
        self._adapters: dict[int, str] = {}  # LoRA id -> the name it is served under

    async def _post(self, path: str, **kwargs: Any) -> httpx.Response:
        response = await self._client.post(path, **kwargs)
        if response.status_code != 200:
            raise EngineError(f"vLLM server {path}: HTTP {response.status_code} {response.text}")
        return response

    async def pause_generation(self, *, mode: str, clear_cache: bool) -> None:
        await self._post("/pause", params={"mode": mode, "clear_cache": str(clear_cache).lower()})

    async def resume_generation(self) -> None:
        await self._post("/resume")

    async def collective_rpc(self, method: str, args: tuple[str, ...] = ()) -> list[Any]:
        answer = await self._post("/collective_rpc", json={"method": method, "args": list(args)})
        return answer.json().get("results", []) if answer.content else []

    async def reset_prefix_cache(self) -> None:
        await self._post("/reset_prefix_cache")

    async def add_lora(self, request: Any) -> bool:
        answer = await self._client.post(
            "/v1/load_lora_adapter",
            json={"lora_name": request.lora_name, "lora_path": request.lora_path},
        )
        if answer.status_code != 200:
            return False
        self._adapters[request.lora_int_id] = request.lora_name
        return True

    async def list_loras(self) -> set[int]:
        return set(self._adapters)

    async def remove_lora(self, lora_id: int) -> bool:
        name = self._adapters.pop(lora_id)
        answer = await self._client.post("/v1/unload_lora_adapter", json={"lora_name": name})
        return answer.status_code == 200

    async def aclose(self) -> None:
        await self._client.aclose()


class VLLMServerEngine(VLLMFront):
    """A RolloutEngine served by a vLLM server this engine started and stops on close."""

    closed_message = "the vLLM server engine is closed"

    def __init__(self, server: VLLMServer, *, tokenizer: Any = None, timeout: float = 600) -> None:
        from rllm_agents.engines.openai import OpenAIEngine
        from rllm_agents.engines.vllm.policy import PolicyState
        from rllm_agents.models import load_tokenizer

        self.server = server
        self.settings = server.settings
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(server.model_dir)
        self.dtype = self.settings.dtype
        self._timeout = timeout
        self._thread = LoopThread("vllm-server-engine")
        self._control = ServerControl(server.root_url)
        self._clients: dict[str, OpenAIEngine] = {}  # one per served name (base, adapters)
        weights_dtype = None if self.dtype == "auto" else _torch_dtype(self.dtype)
        self.policy = PolicyState(self._control, self.settings, weights_dtype=weights_dtype)

    @classmethod
    def start(cls, model: str = "smollm2", *, tokenizer: Any = None, **server_options: Any):
        """Start a server for `model` (settings as keywords, see VLLMSettings) and an engine
        on it; the server is stopped again if anything fails."""
        server = VLLMServer(model, **server_options).start()
        try:
            return cls(server, tokenizer=tokenizer)
        except BaseException:
            server.close()
            raise

    async def _generate(self, prompt_ids: list[int], sampling: SamplingParams) -> ModelOutput:
        async with self.policy.lease() as policy:
            name = policy.lora_request.lora_name if policy.lora_request else None
            output = await self._client(name).generate(prompt_ids=prompt_ids, sampling=sampling)
        output.policy_version = policy.version
        return output

    async def _prompt_logprobs(self, token_ids: list[int], start: int) -> list[float | None]:
        async with self.policy.lease() as policy:
            name = policy.lora_request.lora_name if policy.lora_request else None
            return await self._client(name).prompt_logprobs(token_ids, start)

    def _client(self, adapter: str | None) -> Any:
        from rllm_agents.engines.openai import OpenAIEngine

        name = adapter or self.server.served_name
        if name not in self._clients:
            self._clients[name] = OpenAIEngine(
                self.server.base_url,
                name,
                tokenizer=self.tokenizer,
                timeout=self._timeout,
                max_retries=1,
                extra_body={"return_token_ids": True},
            )
        return self._clients[name]

    def close(self) -> None:
        """Close the HTTP clients and stop the server (idempotent)."""
        try:
            if self._thread.running:
                self._thread.call(self._close_clients(), timeout=30)
        finally:
            self.policy.close()
            self._thread.stop()
            self.server.close()

    async def _close_clients(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        await self._control.aclose()


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)
