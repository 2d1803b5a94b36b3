"""Every token-in/token-out engine kind passes the same checks (conformance.py) on the
embedded SmolLM2: the transformers engine in-process, vLLM in-process, and vLLM's OpenAI server
reached through the OpenAI-compatible engine."""

from __future__ import annotations

import pytest

from tests.agents.engines.conformance import CHECKS, VLLM_LOGPROB_ATOL, Subject


def _local(request: pytest.FixtureRequest) -> Subject:
    from rllm_agents.engines.local import LocalEngine

    model, tokenizer = request.getfixturevalue("smollm2_reference")
    engine = LocalEngine(model, tokenizer)  # the same float32 weights: only rounding differs
    request.addfinalizer(engine.close)
    return Subject(engine, tokenizer, model, logprob_atol=1e-4)


def _vllm(request: pytest.FixtureRequest) -> Subject:
    engine = request.getfixturevalue("vllm_engine")
    model, _ = request.getfixturevalue("smollm2_reference")
    return Subject(engine, engine.tokenizer, model, VLLM_LOGPROB_ATOL[engine.dtype])


def _vllm_server(request: pytest.FixtureRequest) -> Subject:
    engine = request.getfixturevalue("vllm_server_engine")
    model, _ = request.getfixturevalue("smollm2_reference")
    return Subject(engine, engine.tokenizer, model, VLLM_LOGPROB_ATOL[engine.dtype])


KINDS = {"local": _local, "vllm": _vllm, "vllm-server": _vllm_server}


@pytest.fixture(params=sorted(KINDS))
def subject(request):
    return KINDS[request.param](request)


@pytest.mark.slow
@pytest.mark.parametrize("check", list(CHECKS))
async def test_engine_conformance(subject, check):
    await CHECKS[check](subject)
