"""The weight-sync contract on the tiny model: merged LoRA weights, versions on every output,
and the shared weights file a vLLM engine loads from (vLLM itself: test_vllm_engine.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from rllm_agents.engines.base import ModelOutput, SamplingParams
from rllm_agents.engines.local import LocalEngine
from rllm_agents.engines.packed_weights import WeightsFile, map_file
from rllm_agents.engines.vllm.policy import weights_to_send
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


def test_the_weights_file_holds_what_vllm_loads_in_its_dtype(tiny):
    state = dict(tiny.state_dict())
    state["model.rotary_emb.inv_freq"] = torch.ones(4)
    weights = weights_to_send(state)
    assert "model.rotary_emb.inv_freq" not in weights and len(weights) == len(state) - 1
    with WeightsFile(weights, torch.bfloat16) as file:
        read = map_file(file.path, file.table())
        assert set(read) == set(weights)
        for name, tensor in weights.items():
            assert read[name].dtype == torch.bfloat16
            assert torch.equal(read[name], tensor.to(torch.bfloat16))
        # The tied LM head is stored once, beside the embedding.
        unique = sum({t.data_ptr(): t.numel() for t in weights.values()}.values())
        assert os.path.getsize(file.path) < 2 * unique + 64 * len(weights)

        changed = {name: tensor + 1 for name, tensor in weights.items()}
        assert not file.fits(changed)  # the tie is gone: another layout
        doubled = {name: tensor * 2 for name, tensor in weights.items()}
        doubled["lm_head.weight"] = doubled["model.embed_tokens.weight"]
        file.write(doubled)  # the same file, written in place
        again = map_file(file.path, file.table())
        assert torch.equal(again["model.norm.weight"], doubled["model.norm.weight"].bfloat16())
        with pytest.raises(ValueError, match="differ"):
            file.write({"other": torch.zeros(3)})
    assert not os.path.exists(file.path)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names the file through /proc")
def test_a_weights_file_is_read_by_another_process_and_gone_with_a_killed_owner(tmp_path):
    """The file has no name in the directory: another process reads it through the owner's
    descriptor, and a SIGKILL of the owner leaves no half-gigabyte file in /dev/shm."""
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, torch\n"
            "from rllm_agents.engines.packed_weights import WeightsFile\n"
            "file = WeightsFile({'w': torch.arange(6.0).reshape(2, 3)})\n"
            "print(file.path, file.table(), sep='\\n', flush=True)\n"
            "time.sleep(300)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        path, table = owner.stdout.readline().strip(), owner.stdout.readline().strip()
        assert path == f"/proc/{owner.pid}/fd/{path.rsplit('/', 1)[1]}", path
        assert torch.equal(map_file(path, table)["w"], torch.arange(6.0).reshape(2, 3))
        inode = os.stat(path).st_ino
        named = [p for d in ("/dev/shm", tempfile.gettempdir()) for p in Path(d).glob("rllm-*")]
        assert not [p for p in named if os.stat(p).st_ino == inode]
    finally:
        owner.kill()
        owner.wait()
    assert not os.path.exists(path)
