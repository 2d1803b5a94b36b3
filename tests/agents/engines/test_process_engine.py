"""`ProcessEngine`: the LocalEngine in a process of its own, on the tiny model.

What a trainer relies on: it samples exactly what the same engine in-process samples; weights
pushed into it change what it generates, to log-probs that match the trainer's own model
(same precision: within 1e-5); a LoRA policy is served merged (the engine here starts from one); errors come back as the same
exception types; and the child never outlives its owner (closed, or killed with SIGKILL).
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from rllm_agents.engines.base import ContextOverflow, EngineError, SamplingParams
from rllm_agents.engines.local import LocalEngine
from rllm_agents.engines.process.engine import ProcessEngine

from tests.parts import require_module

PROMPTS = [[{"role": "user", "content": f"Count to {n}."}] for n in range(4)]
SAMPLING = SamplingParams(temperature=1.0, max_tokens=10, seed=11)
SAME_PRECISION_TOLERANCE = 1e-5  # fp32 both sides: only the thread count's summation order


@pytest.fixture(scope="module")
def tiny():
    from rllm_agents.models import load_model, load_tokenizer

    return load_model("tiny"), load_tokenizer("tiny")


@pytest.fixture(scope="module")
def lora_policy(tiny):
    """The tiny model with a LoRA adapter that changes its outputs (peft's B starts at 0)."""
    peft = require_module("peft", "peft comes with rllm-train")
    model, _ = tiny
    wrapped = peft.get_peft_model(
        copy.deepcopy(model), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"])
    )
    with torch.no_grad():
        for name, parameter in wrapped.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.2, generator=torch.Generator().manual_seed(1))
    return wrapped


@pytest.fixture(scope="module")
def process_engine(tiny, lora_policy):
    """The engine started from a LoRA policy, as a LoRA run's trainer starts it."""
    _, tokenizer = tiny
    engine = ProcessEngine(lora_policy, tokenizer, max_batch_size=8, cpu_threads=1)
    yield engine
    engine.close()


async def play(engine) -> list:
    return await engine.generate_together([{"messages": p, "sampling": SAMPLING} for p in PROMPTS])


def play_here(engine) -> list:
    """`play` on an in-process engine with the child's one thread: the order of a sum's terms
    follows the thread count, and a near-tie between two tokens follows the order (the
    suite's earlier tests may leave this process's torch on any count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return asyncio.run(play(engine))
    finally:
        torch.set_num_threads(threads)


def changed_weights(model, scale: float = 0.05) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        name: tensor + scale * torch.randn(tensor.shape, generator=generator)
        for name, tensor in model.state_dict().items()
    }


def test_it_samples_what_the_engine_in_process_samples_and_follows_pushed_weights(
    tiny, lora_policy, process_engine
):
    model, tokenizer = tiny
    # The trainer's model, as the engine must serve it: the adapter merged in.
    trainer_copy = copy.deepcopy(lora_policy).merge_and_unload()
    local = LocalEngine(trainer_copy, tokenizer, max_batch_size=8)
    try:
        apart, here = asyncio.run(play(process_engine)), play_here(local)
        assert [o.completion_ids for o in apart] == [o.completion_ids for o in here]
        assert all(o.policy_version == 0 for o in apart)
        base = LocalEngine(model, tokenizer, max_batch_size=8)  # without the adapter
        try:
            original = play_here(base)
        finally:
            base.close()
        assert [o.completion_ids for o in apart] != [o.completion_ids for o in original]

        weights = changed_weights(trainer_copy)
        trainer_copy.load_state_dict(weights)  # the trainer's model after an "update"
        process_engine.update_weights(weights, version=3)
        after, expected = asyncio.run(play(process_engine)), play_here(local)
    finally:
        local.close()
    assert process_engine.policy_version == 3
    assert all(o.policy_version == 3 for o in after)
    assert [o.completion_ids for o in after] != [o.completion_ids for o in apart]
    assert [o.completion_ids for o in after] == [o.completion_ids for o in expected]
    gap = max(
        abs(a - b)
        for mine, theirs in zip(after, expected, strict=True)
        for a, b in zip(mine.logprobs, theirs.logprobs, strict=True)
    )
    assert gap < SAME_PRECISION_TOLERANCE
    # The sender's tensors are its own still: nothing was moved into shared memory under it.
    assert not any(tensor.is_shared() for tensor in weights.values())


def test_errors_come_back_as_their_own_types_and_a_closed_engine_says_so(tiny):
    model, tokenizer = tiny
    engine = ProcessEngine(model, tokenizer, max_batch_size=2, cpu_threads=1)
    too_long = [1] * (model.config.max_position_embeddings + 1)
    with pytest.raises(ContextOverflow, match="does not fit"):
        asyncio.run(engine.generate(prompt_ids=too_long, sampling=SAMPLING))
    with pytest.raises(ValueError, match="does not match the model"):
        engine.update_weights({"no.such.weight": torch.zeros(1)}, version=1)

    # A caller that gives up (an episode timeout) does not stall the engine for the others.
    async def give_up_then_ask():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                engine.generate(PROMPTS[0], sampling=SamplingParams(max_tokens=4000)), 0.05
            )
        return await engine.generate(PROMPTS[1], sampling=SAMPLING)

    assert asyncio.run(give_up_then_ask()).completion_ids
    engine.close()
    assert not engine.alive
    with pytest.raises(EngineError, match="closed"):
        asyncio.run(engine.generate(PROMPTS[0], sampling=SAMPLING))


OWNER = textwrap.dedent(
    """
    import sys
    from rllm_agents.engines.process.engine import ProcessEngine
    from rllm_agents.models import load_model, load_tokenizer

    engine = ProcessEngine(load_model("tiny"), load_tokenizer("tiny"), cpu_threads=1)
    print(engine._process.pid, flush=True)
    sys.stdin.read()  # until the test kills this process
    """
)


def test_the_child_does_not_outlive_an_owner_killed_with_sigkill():
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(owner.stdout.readline())
        os.kill(child, 0)  # running
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _running(child):
            time.sleep(0.1)
        assert not _running(child)
    finally:
        owner.kill()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
