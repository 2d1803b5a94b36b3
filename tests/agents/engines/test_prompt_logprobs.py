"""Prompt log-probs (rllm_agents.engines.scoring): each engine's log-prob of every token of a
sequence it is given, held to the float32 transformers model on the same weights.

Measured on these sequences (scored_sequences.py; embedded SmolLM2, 2 cores), largest and mean
gap per token: the transformers LocalEngine 2e-5 (float32 both sides: only the summation order
differs); the ProcessEngine the same; llama.cpp in this process at F16 0.029 and 0.0029; the
llama-cpp-python server through the OpenAI client 0.38 and 0.071 - it serves the shipped Q4_1
GGUF, whose matrix products also round the activations to 8 bits. The tolerances leave room
for other CPUs' kernels. vLLM: test_prompt_logprobs_vllm.py.
"""

from __future__ import annotations

import asyncio

import pytest
from rllm_agents.engines.base import EngineError, PromptRejected
from rllm_agents.engines.local import LocalEngine
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.engines.scoring import scores_prompts
from rllm_agents.testing.fault_server import FaultServer

from tests.agents.engines.scored_sequences import (
    SCORED_FROM,
    canonical,
    gaps,
    reference_logprobs,
    scored_sequences,
)
from tests.parts import require_module

SAME_PRECISION = 1e-4  # largest gap, float32 both sides (measured 2e-5)
F16_LARGEST, F16_MEAN = 0.1, 0.01  # llama.cpp at F16 (measured 0.029, 0.0029)
Q4_LARGEST, Q4_MEAN = 1.0, 0.2  # the server's Q4_1 GGUF (measured 0.38, 0.071)


@pytest.fixture(scope="module")
def sequences(smollm2_reference):
    model, tokenizer = smollm2_reference
    sequences = scored_sequences(tokenizer)
    assert not canonical(tokenizer, sequences[-1])  # the premise of the last one
    references = [reference_logprobs(model, ids, SCORED_FROM) for ids in sequences]
    return sequences, references


async def score_all(engine, sequences, start=SCORED_FROM):
    return await asyncio.gather(*(engine.prompt_logprobs(ids, start) for ids in sequences))


def largest_and_mean(answers, references):
    measured = [
        gaps(answer, reference) for answer, reference in zip(answers, references, strict=True)
    ]
    return max(m[0] for m in measured), max(m[1] for m in measured), sum(m[2] for m in measured)


async def test_the_transformers_engine_scores_what_the_model_computes(smollm2_reference, sequences):
    model, tokenizer = smollm2_reference
    engine = LocalEngine(model, tokenizer)
    assert scores_prompts(engine)
    answers = await score_all(engine, sequences[0])
    # From the second token on: the whole sequence but its first token.
    whole = await engine.prompt_logprobs(sequences[0][0], 1)
    with pytest.raises(PromptRejected, match="one token at least"):
        await engine.prompt_logprobs(sequences[0][0], len(sequences[0][0]))
    engine.close()
    largest, _, missing = largest_and_mean(answers, sequences[1])
    assert largest < SAME_PRECISION and missing == 0
    assert whole[SCORED_FROM - 1 :] == pytest.approx(answers[0], abs=SAME_PRECISION)


async def test_the_process_engine_scores_in_its_child(smollm2_reference, sequences):
    from rllm_agents.engines.process.engine import ProcessEngine

    model, tokenizer = smollm2_reference
    engine = ProcessEngine(model, tokenizer, cpu_threads=1)
    try:
        answers = await score_all(engine, sequences[0])
        with pytest.raises(PromptRejected):  # the child's refusal comes back as it was raised
            await engine.prompt_logprobs([1], 1)
    finally:
        engine.close()
    largest, _, missing = largest_and_mean(answers, sequences[1])
    assert largest < SAME_PRECISION and missing == 0


async def test_llamacpp_in_this_process_scores_at_f16(smollm2_reference, sequences):
    require_module("llama_cpp", "llama-cpp-python comes with rllm-agents[smollm2]")
    from rllm_agents.engines.llamacpp.batch import LlamaCppModel
    from rllm_agents.engines.llamacpp.gguf_retype import f16_copy
    from rllm_agents.models import smollm2_gguf_path

    _, tokenizer = smollm2_reference
    served = LlamaCppModel(f16_copy(smollm2_gguf_path()), threads=2, max_sequences=4)
    engine = LocalEngine(served, tokenizer)
    try:
        answers = await score_all(engine, sequences[0])
        # A second read of the first sequence starts from its cached context, and scores alike.
        reads = served.prompt_reads.reused
        again = await engine.prompt_logprobs(sequences[0][0], SCORED_FROM)
        assert served.prompt_reads.reused >= reads + SCORED_FROM - 1
    finally:
        engine.close()
    largest, mean, missing = largest_and_mean(answers, sequences[1])
    print(f"\nllama.cpp F16 against transformers: largest {largest:.3g}, mean {mean:.3g}")
    assert largest < F16_LARGEST and mean < F16_MEAN and missing == 0
    assert again == pytest.approx(answers[0], abs=1e-4)


async def test_the_llamacpp_server_scores_through_the_openai_client(
    llamacpp_server, smollm2_reference, sequences
):
    _, tokenizer = smollm2_reference
    ids, references = sequences
    engine = OpenAIEngine(
        llamacpp_server.base_url, llamacpp_server.model_alias, tokenizer=tokenizer, max_retries=0
    )
    # It sorts the vocabulary for every token it echoes (some 50 ms a token): the chat of
    # several turns alone, and a short sequence it would tokenise otherwise.
    unusual = ids[-1][: SCORED_FROM + 2] + ids[-1][-7:-4]
    try:
        answer = await engine.prompt_logprobs(ids[1], SCORED_FROM)
        # Text prompts only: a sequence it tokenises otherwise is refused, not misread.
        with pytest.raises(EngineError, match="tokenised the prompt otherwise"):
            await engine.prompt_logprobs(unusual, SCORED_FROM)
    finally:
        await engine.aclose()
    assert engine.token_prompts_supported is False
    assert not canonical(tokenizer, unusual)
    largest, mean, missing = gaps(answer, references[1])
    print(f"\nllama-cpp-python's server (Q4_1) against transformers: {largest:.3g}, {mean:.3g}")
    assert largest < Q4_LARGEST and mean < Q4_MEAN
    # It leaves out every token equal to its BOS id (<|im_start|>, which opens each turn).
    assert missing == ids[1][SCORED_FROM:].count(tokenizer.bos_token_id) > 0


async def test_a_server_without_prompt_log_probs_is_named():
    # A server that answers completions without any prompt log-probs (a hosted chat API's).
    with FaultServer(completion="Up", record_bodies=True) as server:
        engine = OpenAIEngine(server.base_url, "canned", max_retries=0)
        with pytest.raises(EngineError, match="returned no prompt log-probs"):
            await engine.prompt_logprobs([1, 2, 3], 1)
        await engine.aclose()
        asks = [body.get("echo") or body.get("prompt_logprobs") for body in server.stats.bodies]
    assert asks == [True, 0]  # the echo, then vLLM's field
