"""Which engine ``rllm-eval`` runs a model on: llama.cpp for a model with a GGUF (smollm2) when
llama-cpp-python is installed, transformers otherwise (with a one-line notice for smollm2), the
served model with --base-url; and a run on the llama.cpp default, sized to its slots."""

from __future__ import annotations

import json

import pytest
from rllm_agents.cli.engine_choice import (
    LLAMACPP,
    SERVED,
    TRANSFORMERS,
    EngineChoice,
    choose_engine,
)
from rllm_agents.cli.eval import EPISODES_PER_SLOT, build_parser, main
from rllm_agents.engines.llamacpp.server import default_slots, llamacpp_available

from tests.parts import require_part


def installed() -> bool:
    return True


def not_installed() -> bool:
    return False


@pytest.mark.parametrize(
    ("model", "options", "kind"),
    [
        ("smollm2", {}, LLAMACPP),
        ("/models/my-model.Q4_0.gguf", {}, LLAMACPP),
        ("tiny", {}, TRANSFORMERS),  # no GGUF
        ("/models/hf-directory", {}, TRANSFORMERS),
        ("smollm2", {"engine": TRANSFORMERS}, TRANSFORMERS),
        ("tiny", {"engine": LLAMACPP}, LLAMACPP),  # asked for: its start says what is wrong
        ("smollm2", {"base_url": "http://127.0.0.1:8000/v1"}, SERVED),
    ],
)
def test_the_default_engine_of_each_model(model, options, kind):
    assert choose_engine(model, llamacpp_installed=installed, **options) == EngineChoice(kind)


def test_without_llamacpp_smollm2_falls_back_to_transformers_saying_so():
    choice = choose_engine("smollm2", llamacpp_installed=not_installed)
    assert choice.kind == TRANSFORMERS
    assert "llama-cpp-python is not installed" in choice.notice and "\n" not in choice.notice
    # Asked for explicitly, or for a model transformers cannot load, there is no fallback.
    assert choose_engine("smollm2", LLAMACPP, llamacpp_installed=not_installed).kind == LLAMACPP
    assert choose_engine("m.gguf", llamacpp_installed=not_installed).kind == LLAMACPP
    assert choose_engine("tiny", llamacpp_installed=not_installed).notice is None


def test_llamacpp_flag_is_an_alias_of_engine_llamacpp():
    parser = build_parser()
    assert parser.parse_args(["--env", "e", "--llamacpp"]).engine == LLAMACPP
    assert parser.parse_args(["--env", "e", "--engine", "transformers"]).engine == TRANSFORMERS
    assert parser.parse_args(["--env", "e"]).engine is None


@pytest.mark.slow
def test_smollm2_runs_on_llamacpp_by_default(tmp_path):
    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    output = tmp_path / "run"
    argv = ["--env", "rllm/FrozenLake-v0", "--model", "smollm2", "--num-tasks", "2"]
    argv += ["--max-turns", "1", "--max-tokens", "8", "--output", str(output), "--no-progress"]
    assert main(argv) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert summary["config"]["engine"] == LLAMACPP
    assert summary["serving_slots"] == default_slots()
    assert summary["config"]["parallel"] == EPISODES_PER_SLOT * default_slots()
    assert summary["episodes"] == 2 and summary["errors"] == 0
    assert summary["completion_tokens"] > 0  # the server's counts, though it sends no ids
    assert summary["queue_time"] >= 0
