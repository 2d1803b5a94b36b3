"""Weight sync into llama.cpp: the trainer's weights, exported to GGUF, are what the server runs.

One llama.cpp server (the embedded SmolLM2, Q4_1/Q8_0) and the same model in transformers (fp32,
the trainer's copy). The gap between them is measured as the mean absolute difference of the
log-probs both give the same tokens (teacher-forced: the prompt and a fixed reply, scored by
llama.cpp through ``echo``).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest
import torch
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.llamacpp.gguf_export import export_gguf, permute_rotary, read_layout
from rllm_agents.engines.llamacpp.server import LlamaCppEngine, llamacpp_available
from rllm_agents.engines.weight_sync import PolicyWeights

from tests.parts import require_part

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

QUESTION = [{"role": "user", "content": "What is 3 + 4?"}]
TARGET = "The answer is 7. Seven is the sum of three and four."


@pytest.fixture(scope="module")
def tokenizer():
    from rllm_agents.models import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="module")
def model():
    from rllm_agents.models import load_model

    return load_model("smollm2")


@pytest.fixture(scope="module")
def engine(tokenizer):
    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    engine = LlamaCppEngine.start(tokenizer=tokenizer, slots=1, n_ctx=512, n_threads=2)
    try:
        yield engine
    finally:
        asyncio.run(engine.aclose())


def prompt_text(tokenizer) -> str:
    return tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)


def served_logprobs(engine, text: str, count: int) -> np.ndarray:
    """llama.cpp's log-probs of the last `count` tokens of `text` (teacher-forced, via echo).

    Only a tail is compared: llama-cpp-python's echo leaves out special tokens' entries, so
    the reply (no special tokens) is what lines up with transformers position by position.
    """
    body = {"prompt": text, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True}
    answer = httpx.post(f"{engine.servers[0].base_url}/completions", json=body, timeout=60).json()
    logprobs = answer["choices"][0]["logprobs"]["token_logprobs"]
    echoed = logprobs[: len(logprobs) - answer["usage"]["completion_tokens"]]
    return np.array(echoed[-count:], dtype=np.float64)


def trainer_logprobs(model, ids: list[int], count: int) -> np.ndarray:
    tokens = torch.tensor([ids])
    with torch.no_grad():
        logits = model(tokens).logits[0, :-1].double()
    picked = torch.log_softmax(logits, -1).gather(1, tokens[0, 1:, None])[:, 0]
    return picked[-count:].numpy()


def teacher_forced(tokenizer, reply: str) -> tuple[str, list[int], int]:
    """The chat prompt followed by `reply`: as text, as token ids, and how many of those
    ids are the reply's (the tail both sides score)."""
    prompt = prompt_text(tokenizer)
    ids = tokenizer(prompt + reply, add_special_tokens=False)["input_ids"]
    count = len(ids) - len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    return prompt + reply, ids, count


def logprob_gap(engine, model, tokenizer, reply: str) -> float:
    """Mean |llama.cpp - trainer| log-prob over the tokens of `reply` after the chat prompt."""
    text, ids, count = teacher_forced(tokenizer, reply)
    served = served_logprobs(engine, text, count)
    return float(np.abs(served - trainer_logprobs(model, ids, count)).mean())


async def greedy(engine) -> tuple[str, int | None]:
    output = await engine.generate(QUESTION, sampling=SamplingParams(temperature=0.0, max_tokens=8))
    return output.text, output.policy_version


def test_permute_rotary_interleaves_the_two_halves_of_each_head():
    # Two heads of four rows: HF halves (0,1 | 2,3) become llama.cpp pairs (0,2,1,3).
    rows = np.arange(8, dtype=np.float32)[:, None]
    assert permute_rotary(rows, n_head=2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_exporting_the_unchanged_weights_gives_back_the_served_gguf(engine, model, tmp_path):
    """The name map, the Q/K permutation and every quantisation type, checked byte for byte:
    the HF model was read (dequantised) from this GGUF, and re-quantising is exact."""
    shipped = engine.servers[0].model_path
    exported = export_gguf(
        model.state_dict(), shipped, tmp_path / "same.gguf", layout=read_layout(shipped)
    )
    assert exported.read_bytes() == shipped.read_bytes()


async def test_sync_moves_llamacpp_onto_the_trainers_weights(engine, model, tokenizer):
    floor = logprob_gap(engine, model, tokenizer, TARGET)  # quantisation alone
    before_text, before_version = await greedy(engine)
    assert before_version == 0

    # A change the quantised copy can represent: Q4_1 steps are ~1e-2 for these weights, so
    # an update much smaller than that (a few Adam steps at lr 1e-4) mostly rounds away.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in model.model.layers:
            weight = layer.mlp.down_proj.weight
            weight.add_(torch.randn(weight.shape, generator=generator) * 0.03)
    stale = logprob_gap(engine, model, tokenizer, TARGET)

    started = time.perf_counter()
    timing = engine.update_weights(PolicyWeights.from_model(model, 1).state_dict, version=1)
    sync_s = time.perf_counter() - started
    synced = logprob_gap(engine, model, tokenizer, TARGET)
    after_text, after_version = await greedy(engine)
    print(
        f"\nlog-prob gap |llama.cpp - trainer| per token: quantisation floor {floor:.4f}, "
        f"stale {stale:.4f}, after sync {synced:.4f}; export {timing.export_s:.1f}s, "
        f"restart {timing.restart_s:.1f}s, total {sync_s:.1f}s\n"
        f"greedy before: {before_text!r}\ngreedy after:  {after_text!r}"
    )
    assert after_version == 1 and engine.policy_version == 1
    assert after_text != before_text
    # After the sync the gap is the quantisation error of the *new* weights. It exceeds the
    # floor measured first, whose weights were read from this very GGUF and so sit exactly
    # on its quantisation grid; off-grid weights (any trained ones) lose more.
    assert stale > 2 * synced
    assert floor < 0.1
