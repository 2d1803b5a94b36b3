"""LocalEngine on the embedded tiny model: real batching, exact logprobs, weight swaps."""

from __future__ import annotations

import asyncio
import dataclasses

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


async def _until(condition, timeout=60.0):
    """Wait (without blocking the loop) until `condition()` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.005)


async def test_late_requests_join_the_running_batch(engine):
    """Continuous batching: a request arriving mid-generation joins the running sequences,
    finishes first when it is short, and gets the tokens it would get alone."""
    long_prompt, short_prompt = _prompts(2)
    long_sampling = SamplingParams(temperature=0.0, max_tokens=200)
    short_sampling = SamplingParams(temperature=0.0, max_tokens=6)
    long_alone = await engine.generate(long_prompt, sampling=long_sampling)
    short_alone = await engine.generate(short_prompt, sampling=short_sampling)
    assert long_alone.finish_reason == "length"  # the premise: it really runs 200 steps

    before = engine.stats.generated_tokens
    passes, rows = engine.stats.decode_passes, engine.stats.decoded_rows
    long_task = asyncio.create_task(engine.generate(long_prompt, sampling=long_sampling))
    await _until(lambda: engine.stats.generated_tokens - before >= 20)
    short = await engine.generate(short_prompt, sampling=short_sampling)
    assert not long_task.done(), "the short request waited for the long one to finish"
    long = await long_task

    # Joined mid-flight (different cache lengths, left padding) without changing any result.
    assert short.completion_ids == short_alone.completion_ids
    assert long.completion_ids == long_alone.completion_ids
    assert long.logprobs == pytest.approx(long_alone.logprobs, abs=1e-4)
    shared = (engine.stats.decoded_rows - rows) - (engine.stats.decode_passes - passes)
    assert shared >= len(short.completion_ids) - 1  # decode steps that carried both rows


async def test_mixed_sampling_rows_share_a_batch(engine):
    """Greedy, seeded and top-p rows decode together and each gets its own answer."""
    settings = [
        SamplingParams(temperature=0.0, max_tokens=10),
        SamplingParams(temperature=1.0, max_tokens=10, seed=21),
        SamplingParams(temperature=0.7, top_p=0.5, max_tokens=10, seed=22),
    ]
    prompts = _prompts(3)
    alone = [await engine.generate(m, sampling=s) for m, s in zip(prompts, settings, strict=True)]
    batches = engine.stats.batches
    together = await asyncio.gather(
        *(engine.generate(m, sampling=s) for m, s in zip(prompts, settings, strict=True))
    )
    assert engine.stats.batches - batches < 3
    for single, batched in zip(alone, together, strict=True):
        assert batched.completion_ids == single.completion_ids


async def test_cancelled_request_leaves_the_batch_promptly(engine):
    """A caller that gives up (task cancelled, trajectory timeout) frees its slot at once."""
    sampling = SamplingParams(temperature=1.0, max_tokens=4000, seed=5)
    prompt = _prompts(1)[0]
    preview = await engine.generate(prompt, sampling=dataclasses.replace(sampling, max_tokens=60))
    assert preview.finish_reason == "length"  # same seed: the long run cannot stop before 60

    cancelled_before = engine.stats.cancelled
    start = engine.stats.generated_tokens
    task = asyncio.create_task(engine.generate(prompt, sampling=sampling))
    await _until(lambda: engine.stats.generated_tokens - start >= 20)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until(lambda: engine.stats.cancelled == cancelled_before + 1, timeout=5)
    stopped_at = engine.stats.generated_tokens
    await asyncio.sleep(0.3)
    assert engine.stats.generated_tokens == stopped_at, "the cancelled row kept decoding"
    assert stopped_at - start < 1000

    # The engine is free for the next caller; a timeout cancels the same way.
    quick = await engine.generate(prompt, sampling=SamplingParams(temperature=0, max_tokens=3))
    assert len(quick.completion_ids) == 3
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(engine.generate(prompt, sampling=sampling), timeout=0.3)
    await _until(lambda: engine.stats.cancelled == cancelled_before + 2, timeout=5)


async def test_weight_update_waits_for_running_sequences(engine):
    """A sequence in flight finishes under the weights it started with."""
    prompt = _prompts(1)[0]
    sampling = SamplingParams(temperature=0.0, max_tokens=120)
    original = {k: v.clone() for k, v in engine.model.state_dict().items()}
    expected = await engine.generate(prompt, sampling=sampling)
    perturbed = {k: v + 0.5 * torch.randn_like(v) for k, v in original.items()}

    start = engine.stats.generated_tokens
    running = asyncio.create_task(engine.generate(prompt, sampling=sampling))
    await _until(lambda: engine.stats.generated_tokens - start >= 10)
    try:
        await asyncio.to_thread(engine.update_weights, perturbed)
        assert running.done()  # update_weights returned only after the sequence ended
        assert (await running).completion_ids == expected.completion_ids
        changed = await engine.generate(prompt, sampling=sampling)
        assert changed.completion_ids != expected.completion_ids
    finally:
        engine.update_weights(original)


@pytest.mark.parametrize(
    "prompts",
    [
        [[1, 4093, 198, 30, 2], [17, 5, 900], [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]],  # no shared head
        [list(range(100, 130)), list(range(100, 120)), list(range(100, 131)) + [7]],  # nested
    ],
)
async def test_prefill_with_and_without_a_shared_prefix_matches_single_runs(engine, prompts):
    outputs = await asyncio.gather(
        *(engine.generate(prompt_ids=p, sampling=GREEDY) for p in prompts)
    )
    for prompt, batched in zip(prompts, outputs, strict=True):
        alone = await engine.generate(prompt_ids=prompt, sampling=GREEDY)
        assert batched.completion_ids == alone.completion_ids
        assert batched.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_common_prefix_leaves_every_prompt_a_token_of_its_own():
    from rllm_agents.engines.running_batch import _common_prefix_length

    assert _common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert _common_prefix_length([[1, 2, 3, 4], [1, 2]]) == 1
    assert _common_prefix_length([[5, 2], [1, 2]]) == 0


async def test_a_failing_prompt_fails_alone(engine):
    """A prompt the model cannot run (a token id outside the vocabulary) fails its own call;
    the sequence already decoding is unaffected."""
    prompt = _prompts(1)[0]
    sampling = SamplingParams(temperature=0.0, max_tokens=80)
    expected = await engine.generate(prompt, sampling=sampling)
    start = engine.stats.generated_tokens
    running = asyncio.create_task(engine.generate(prompt, sampling=sampling))
    await _until(lambda: engine.stats.generated_tokens - start >= 5)
    with pytest.raises(EngineError, match="local generation failed"):
        await engine.generate(prompt_ids=[1, 2, 10**7], sampling=GREEDY)
    assert (await running).completion_ids == expected.completion_ids
