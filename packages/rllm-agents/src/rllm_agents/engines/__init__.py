"""Rollout engines, chosen by name (``make_engine("local", model="tiny")``).

The names are also the ``engine_name`` values of ``AgentExecutionEngine``'s keyword form.

Laid out by kind: what every engine shares sits here (``base``, ``sampling``, ``prompting``,
the event-loop and batching helpers, ``weight_sync``/``packed_weights``, ``child_server``);
each kind has its module or folder: ``local``, ``openai``, ``process/`` (a transformers copy
in a child process), ``llamacpp/`` (servers, in-process batches, GGUF export) and ``vllm/``
(in-process AsyncLLM, its OpenAI server, weight sync, the CPU build's plugin).

Each entry builds one engine kind; heavy modules (torch, vllm) are imported only when that
kind is made, so listing or choosing engines stays cheap. The engine classes are importable
from here too (``from rllm_agents.engines import VLLMEngine``), loaded on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllm_envs.core.loading import load_attr

from rllm_agents.engines.base import (
    EngineError,
    ModelOutput,
    RolloutEngine,
    SamplingParams,
)


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name in `where` from its module (relative to
    `package`) on first use: importing a kind's package loads none of its heavy dependencies,
    which matters inside vLLM's processes, where only the worker extension is wanted."""

    def __getattr__(name: str) -> Any:
        try:
            module = where[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return load_attr(f"{package}.{module}:{name}", "engine")

    return __getattr__


__getattr__ = lazy_exports(
    __name__,
    {
        "LocalEngine": "local",
        "OpenAIEngine": "openai",
        "ProcessEngine": "process.engine",
        "LlamaCppEngine": "llamacpp.server",
        "VLLMEngine": "vllm.engine",
        "VLLMServerEngine": "vllm.server",
    },
)


def _local(model: str = "tiny", **kwargs: Any) -> RolloutEngine:
    from rllm_agents.engines.local import LocalEngine

    return LocalEngine.from_name(model, **kwargs)


def _openai(base_url: str, model: str, **kwargs: Any) -> RolloutEngine:
    from rllm_agents.engines.openai import OpenAIEngine

    return OpenAIEngine(base_url, model, **kwargs)


def _vllm(model: str, **kwargs: Any) -> RolloutEngine:
    from rllm_agents.engines.vllm.engine import VLLMEngine

    return VLLMEngine(model, **kwargs)


def _llamacpp(model: str = "smollm2", **kwargs: Any) -> RolloutEngine:
    from rllm_agents.engines.llamacpp.server import LlamaCppEngine

    return LlamaCppEngine.start(model, **kwargs)


ENGINES: dict[str, Callable[..., RolloutEngine]] = {
    "local": _local,
    "embedded": _local,  # the models shipped in the package ("tiny", "smollm2")
    "openai": _openai,
    "vllm": _vllm,
    "llamacpp": _llamacpp,
}


def make_engine(kind: str, **kwargs: Any) -> RolloutEngine:
    """Build the engine `kind` (one of ENGINES) with its own keyword arguments."""
    try:
        factory = ENGINES[kind]
    except KeyError:
        raise ValueError(f"unknown engine {kind!r}; choose from {sorted(ENGINES)}") from None
    return factory(**kwargs)


__all__ = [
    "ENGINES",
    "EngineError",
    "LlamaCppEngine",
    "LocalEngine",
    "ModelOutput",
    "OpenAIEngine",
    "ProcessEngine",
    "RolloutEngine",
    "SamplingParams",
    "VLLMEngine",
    "VLLMServerEngine",
    "lazy_exports",
    "make_engine",
]
