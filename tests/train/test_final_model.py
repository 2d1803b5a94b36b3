"""A finished run leaves its trained policy as a plain model folder (OUTPUT/model): weights only,
a fraction of a checkpoint's size, loadable by transformers (and so by rllm-eval --model and a
new run's --model), LoRA adapters merged in."""

from __future__ import annotations

import pytest
import torch
from rllm_train.config import build_config
from rllm_train.native.trainer import NativeTrainer
from transformers import AutoModelForCausalLM

from tests.train.conftest import run_overrides


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_the_final_model_is_the_trained_policy_alone(tmp_path, tiny_model, lora_rank):
    output = tmp_path / "run"
    config = build_config(
        overrides=run_overrides(output, tiny_model, **{"model.lora_rank": lora_rank})
    )
    trainer = NativeTrainer(config)
    trainer.train()
    folder = output / "model"
    assert (folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    policy = trainer.model.eval()
    with torch.no_grad():
        expected = policy(input_ids=ids.to(trainer.device)).logits.float().cpu()
        got = loaded(input_ids=ids).logits.float()
    assert torch.allclose(got, expected, atol=1e-4)  # the trained weights, adapters merged in
    weights = sum(path.stat().st_size for path in folder.glob("*.safetensors"))
    [state] = (output / "checkpoints").glob("step_*/state.pt")
    if not lora_rank:  # a full checkpoint also holds Adam's two moments of every weight
        assert weights < state.stat().st_size / 2
