"""The weight-sync contract on the tiny model: merged LoRA weights, versions on every output,
and the parts of the vLLM path that are ours (vLLM itself runs only where it imports)."""

from __future__ import annotations

import pytest
import torch
from rllm_agents.engines.base import ModelOutput, SamplingParams
from rllm_agents.engines.local import LocalEngine
from rllm_agents.engines.vllm_sync import weight_items
from rllm_agents.engines.weight_sync import (
    POLICY_VERSION,
    PolicyWeights,
    record_policy_version,
    sync_weights,
)

from tests.parts import require_module

PROMPT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def tiny():
    from rllm_agents.models import load_model

    return load_model("tiny")


def test_a_lora_policy_is_sent_merged_as_peft_would_merge_it(tiny):
    peft = require_module("peft", "peft is a dependency of rllm-train")
    import copy

    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    wrapped = peft.get_peft_model(copy.deepcopy(tiny), config)
    with torch.no_grad():  # B starts at zero: give the adapter a real effect
        for name, parameter in wrapped.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    weights = PolicyWeights.from_model(wrapped, version=3)
    expected = wrapped.merge_and_unload().state_dict()
    assert set(weights.state_dict) == set(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(weights.state_dict[name], tensor, atol=1e-6, rtol=0)
    assert not torch.equal(
        weights.state_dict["model.layers.0.self_attn.q_proj.weight"],
        tiny.state_dict()["model.layers.0.self_attn.q_proj.weight"],
    )


async def test_local_engine_outputs_carry_the_version_synced_into_it(tiny):
    engine = LocalEngine.from_name("tiny")
    try:
        greedy = SamplingParams(temperature=0.0, max_tokens=6)
        before = await engine.generate(PROMPT, sampling=greedy)
        assert before.policy_version == 0
        changed = {k: v + 0.05 * torch.randn_like(v) for k, v in tiny.state_dict().items()}
        await sync_weights(engine, PolicyWeights(changed, version=7))
        after = await engine.generate(PROMPT, sampling=greedy)
        assert after.policy_version == 7 and engine.policy_version == 7
        assert after.logprobs != before.logprobs
    finally:
        engine.close()


def test_the_version_goes_into_the_steps_info():
    info: dict = {}
    record_policy_version(info, ModelOutput(text="", policy_version=4))
    assert info == {POLICY_VERSION: 4}
    record_policy_version(info := {}, ModelOutput(text=""))  # a server that cannot say
    assert info == {}


def test_vllm_gets_plain_cpu_tensors_and_no_derived_buffers(tiny):
    state = dict(tiny.state_dict())
    state["model.rotary_emb.inv_freq"] = torch.ones(4)
    state["model.norm.weight"] = state["model.norm.weight"].t()  # a view: must be copied out
    items = weight_items(state)
    names = [name for name, _ in items]
    assert "model.rotary_emb.inv_freq" not in names and len(items) == len(state) - 1
    assert all(
        t.device.type == "cpu" and t.is_contiguous() and not t.requires_grad for _, t in items
    )


async def test_vllm_update_weights_changes_its_logprobs():
    """vLLM's real path (collective_rpc + load_weights + reset_prefix_cache), on a GPU."""
    pytest.importorskip("vllm", reason="vLLM is a CUDA-only optional extra; not installed here")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    from rllm_agents.engines.vllm import VLLMEngine
    from rllm_agents.models import load_model

    engine = VLLMEngine("tiny", gpu_memory_utilization=0.2, max_model_len=512, dtype="float32")
    try:
        greedy = SamplingParams(temperature=0.0, max_tokens=6)
        before = await engine.generate(PROMPT, sampling=greedy)
        model = load_model("tiny")
        changed = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
        await sync_weights(engine, PolicyWeights(changed, version=2))
        after = await engine.generate(PROMPT, sampling=greedy)
        assert after.policy_version == 2 and after.logprobs != before.logprobs
        await sync_weights(engine, PolicyWeights(model.state_dict(), version=3))
        again = await engine.generate(PROMPT, sampling=greedy)
        assert again.completion_ids == before.completion_ids
        assert again.logprobs == pytest.approx(before.logprobs, abs=1e-4)
    finally:
        await engine.aclose()
