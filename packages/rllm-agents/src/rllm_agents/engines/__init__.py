"""Rollout engines, chosen by name (``make_engine("local", model="tiny")``).

The names are also the ``engine_name`` values of ``AgentExecutionEngine``'s keyword form.

Each entry builds one engine kind; heavy modules (torch, vllm) are imported only when that
kind is made, so listing or choosing engines stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllm_agents.engines.base import (
    EngineError,
    ModelOutput,
    RolloutEngine,
    SamplingParams,
)


def _local(model: str = "tiny", **kwargs: Any) -> RolloutEngine:
    from rllm_agents.engines.local import LocalEngine

    return LocalEngine.from_name(model, **kwargs)


def _openai(base_url: str, model: str, **kwargs: Any) -> RolloutEngine:
    from rllm_agents.engines.openai import OpenAIEngine

    return OpenAIEngine(base_url, model, **kwargs)


def _vllm(model: str, **kwargs: Any) -> RolloutEngine:
    from rllm_agents.engines.vllm import VLLMEngine

    return VLLMEngine(model, **kwargs)


def _llamacpp(model: str = "smollm2", **kwargs: Any) -> RolloutEngine:
    from rllm_agents.engines.llamacpp_server import LlamaCppEngine

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
    "ModelOutput",
    "RolloutEngine",
    "SamplingParams",
    "make_engine",
]
