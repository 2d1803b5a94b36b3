"""vLLM in-process on the embedded SmolLM2: weight syncs from a trainer's float32 model, the
policy version on every sample, and LoRA adapters hot-loaded as new versions.

One engine serves the session (conftest.vllm_engine); each test leaves it on the original
weights with no adapter.
"""

from __future__ import annotations

import asyncio
import copy
import os

import pytest
import torch
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.weight_sync import PolicyWeights, sync_weights

from tests.agents.engines.conformance import (
    VLLM_LOGPROB_ATOL,
    Subject,
    chat,
    reference_logprobs,
)
from tests.parts import require_module
from tests.processes import cmdline_of, descendants, parent_of, working

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


# Noise on every weight, as a share of each weight's mean size: enough to change what the model
# generates (a gap of about 2.8 from the original), not so much that a bfloat16 engine loses
# the float32 trainer. At 0.5 the norms' noise makes the model chaotic, and an exact sync into a
# bfloat16 vLLM was 4.5 from the trainer (0.12 at 0.1; a float32 engine matches either way).
SYNC_NOISE = 0.1


def _perturbed(model: torch.nn.Module, scale: float, seed: int) -> torch.nn.Module:
    """A copy of `model` with noise on every weight (tied weights stay tied)."""
    changed = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in changed.parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            parameter.add_(scale * parameter.abs().mean() * noise)
    return changed


def _gap(engine, model, out, temperature: float = 0.0) -> float:
    subject = Subject(engine, engine.tokenizer, model, 0.0)
    expected = reference_logprobs(subject, out, temperature)
    return (torch.tensor(out.logprobs) - expected).abs().max().item()


async def test_a_sync_changes_what_it_generates_and_matches_the_trainer(
    vllm_engine, smollm2_reference
):
    engine, (original, _) = vllm_engine, smollm2_reference
    atol = VLLM_LOGPROB_ATOL[engine.dtype]
    before = await engine.generate(chat(1), sampling=GREEDY)
    trained = _perturbed(original, scale=SYNC_NOISE, seed=0)

    timing = await engine.update_weights(PolicyWeights.from_model(trained, 7).state_dict, version=7)
    after = await engine.generate(chat(1), sampling=GREEDY)
    assert after.completion_ids != before.completion_ids
    assert after.policy_version == 7 and engine.policy_version == 7
    gap = _gap(engine, trained, after)
    assert gap <= atol, f"after a sync vLLM is {gap:.4g} from the trainer (> {atol})"
    print(f"\nsync of the 135M model: {timing}; log-prob gap after it {gap:.3g}")

    await sync_weights(engine, PolicyWeights.from_model(original, 8))
    again = await engine.generate(chat(1), sampling=GREEDY)
    assert again.policy_version == 8
    assert again.completion_ids == before.completion_ids
    assert again.logprobs == pytest.approx(before.logprobs, abs=atol)


async def test_requests_keep_the_version_they_started_with(vllm_engine, smollm2_reference):
    engine, (original, _) = vllm_engine, smollm2_reference
    start = engine.policy_version
    long = asyncio.create_task(
        engine.generate(chat(2), sampling=SamplingParams(temperature=0.0, max_tokens=40))
    )
    await asyncio.sleep(0.5)  # it is running when the sync starts
    await engine.update_weights(original.state_dict(), version=start + 1)
    later = await engine.generate(chat(3), sampling=GREEDY)
    running = await long
    # The sync waited for it (sync_pause="wait"): all its tokens came from the old weights.
    assert running.policy_version == start and len(running.completion_ids) > 0
    assert later.policy_version == start + 1


async def test_a_lora_adapter_loads_as_a_new_version_without_touching_the_base(
    vllm_engine, smollm2_reference, tmp_path
):
    peft = require_module("peft", "peft comes with rllm-train")
    engine, (original, _) = vllm_engine, smollm2_reference
    base = await engine.generate(chat(4), sampling=GREEDY)

    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"])
    adapted = peft.get_peft_model(copy.deepcopy(original), config)
    generator = torch.Generator().manual_seed(1)
    # B starts at zero: give the adapter an effect large enough to change greedy tokens (at
    # 0.05 the first twelve sometimes stayed the same).
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.2 * torch.randn(parameter.shape, generator=generator))
    adapted.save_pretrained(tmp_path / "adapter")

    version = engine.policy_version + 1
    await engine.load_lora(tmp_path / "adapter", version=version)
    tuned = await engine.generate(chat(4), sampling=GREEDY)
    assert tuned.policy_version == version
    assert tuned.completion_ids != base.completion_ids
    merged = adapted.merge_and_unload()
    gap = _gap(engine, merged, tuned)
    assert gap <= VLLM_LOGPROB_ATOL[engine.dtype], f"LoRA log-prob gap {gap:.4g}"
    assert _gap(engine, original, tuned) > VLLM_LOGPROB_ATOL[engine.dtype]  # not the base model

    # A full sync replaces the adapter: the base weights were never changed.
    await engine.update_weights(original.state_dict(), version=version + 1)
    plain = await engine.generate(chat(4), sampling=GREEDY)
    assert plain.completion_ids == base.completion_ids


def test_on_a_cpu_the_model_runs_in_the_engine_core(vllm_engine):
    """worker_in_engine_core: below the engine core vLLM starts (a child of this process,
    titled VLLM::EngineCore) no worker process of its own, which would import torch and vLLM
    once more."""
    if not vllm_engine.settings.on_cpu:
        pytest.skip("on a GPU vLLM's workers are processes of their own")
    engine_cores = [
        pid
        for pid in descendants()
        if parent_of(pid) == os.getpid() and cmdline_of(pid).startswith(b"VLLM::EngineCore")
    ]
    assert engine_cores, "no engine core process below this one"
    for core in engine_cores:
        assert not {pid for pid in descendants(core) if working(pid)}, "a worker process"
