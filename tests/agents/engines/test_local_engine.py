"""LocalEngine on the embedded tiny model: real batching, exact logprobs, weight swaps."""

from __future__ import annotations

import asyncio

import pytest
import torch
from rllm_agents.engines.base import EngineError, SamplingParams
from rllm_agents.engines.local import LocalEngine

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def engine():
    engine = LocalEngine.from_name("tiny", max_batch_size=16, batch_wait_s=0.05)
    yield engine
    engine.close()


def _prompts(n):
    return [
        [{"role": "user", "content": f"Question number {i}: what is {i} + {i}?"}] for i in range(n)
    ]


async def test_concurrent_requests_share_forward_batches(engine):
    before = engine.stats.batches, engine.stats.requests
    outputs = await asyncio.gather(*[engine.generate(m, sampling=GREEDY) for m in _prompts(8)])
    batches = engine.stats.batches - before[0]
    assert engine.stats.requests - before[1] == 8
    assert batches < 8, f"8 concurrent requests took {batches} separate batches"
    assert all(len(o.completion_ids) == len(o.logprobs) > 0 for o in outputs)

    # Left padding must not change results: each prompt alone gives the same greedy tokens.
    for messages, batched in zip(_prompts(8)[:3], outputs[:3], strict=True):
        alone = await engine.generate(messages, sampling=GREEDY)
        assert alone.prompt_ids == batched.prompt_ids
        assert alone.completion_ids == batched.completion_ids


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_logprobs_match_a_forward_pass(engine, temperature):
    sampling = SamplingParams(temperature=temperature, top_p=0.9, max_tokens=16, seed=3)
    out = await engine.generate(_prompts(1)[0], sampling=sampling)
    ids = torch.tensor([out.prompt_ids + out.completion_ids])
    with torch.no_grad():
        logits = engine.model(ids).logits[0, len(out.prompt_ids) - 1 : -1].float()
    expected = torch.log_softmax(logits / temperature, -1)
    expected = expected.gather(-1, torch.tensor(out.completion_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


async def test_seeded_sampling_is_reproducible(engine):
    sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=11)
    first = await engine.generate(prompt_ids=[1, 4093, 198, 30, 2], sampling=sampling)
    again = await engine.generate(prompt_ids=[1, 4093, 198, 30, 2], sampling=sampling)
    other = await engine.generate(
        prompt_ids=[1, 4093, 198, 30, 2], sampling=SamplingParams(max_tokens=10, seed=12)
    )
    assert first.completion_ids == again.completion_ids
    assert first.completion_ids != other.completion_ids


async def test_max_tokens_and_stop_strings(engine):
    out = await engine.generate(_prompts(1)[0], sampling=SamplingParams(max_tokens=5, seed=0))
    assert len(out.completion_ids) == 5 and out.finish_reason == "length"

    free = await engine.generate(_prompts(1)[0], sampling=SamplingParams(max_tokens=12, seed=5))
    stop = free.text[4:7]  # a piece of what this seed generates
    cut = await engine.generate(
        _prompts(1)[0], sampling=SamplingParams(max_tokens=12, seed=5, stop=(stop,))
    )
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.find(stop)]
    assert stop not in cut.text
    assert len(cut.completion_ids) < len(free.completion_ids)


async def test_update_weights_changes_outputs_between_batches(engine):
    original = {k: v.clone() for k, v in engine.model.state_dict().items()}
    before = await engine.generate(_prompts(1)[0], sampling=GREEDY)
    perturbed = {k: v + 0.5 * torch.randn_like(v) for k, v in original.items()}
    engine.update_weights(perturbed)
    changed = await engine.generate(_prompts(1)[0], sampling=GREEDY)
    engine.update_weights(original)
    restored = await engine.generate(_prompts(1)[0], sampling=GREEDY)
    assert changed.completion_ids != before.completion_ids
    assert restored.completion_ids == before.completion_ids

    with pytest.raises(ValueError, match="does not match"):
        engine.update_weights({"not.a.weight": torch.zeros(1)})


async def test_bad_requests_get_clear_errors(engine):
    with pytest.raises(ValueError, match="exactly one"):
        await engine.generate(_prompts(1)[0], prompt_ids=[1, 2])
    with pytest.raises(EngineError, match="does not fit"):
        await engine.generate(prompt_ids=[5] * 9000, sampling=GREEDY)


async def test_closed_engine_refuses_work():
    engine = LocalEngine.from_name("tiny")
    await engine.generate(prompt_ids=[1, 2, 3], sampling=SamplingParams(max_tokens=2))
    await engine.aclose()
    engine.close()  # idempotent
    assert engine._worker is None
    with pytest.raises(EngineError, match="closed"):
        await engine.generate(prompt_ids=[1, 2, 3])
