"""What every token-in/token-out engine does, checked the same way for each engine kind.

Each check takes a ``Subject``: the engine, the tokenizer it renders with, a transformers
model holding the same weights in float32 (the trainer's view), and how closely the
engine's log-probs must match that model's (float32 engines: to rounding; bfloat16 ones: to
bfloat16's precision). test_engine_conformance.py runs every check on every kind.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from rllm_agents.chat.tito import render_prompt_ids
from rllm_agents.engines.base import ContextOverflow, EngineError, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=10)
# How far vLLM's log-probs may be from the float32 transformers model's, per token, by the
# dtype vLLM computes in (measured on the embedded SmolLM2; see docs/agents/engines.md). In
# bfloat16 (a CPU with AVX-512 BF16), the worst seen was 0.28: one of eight greedy requests
# batched together; alone, 0.16.
VLLM_LOGPROB_ATOL = {"float32": 2e-3, "bfloat16": 0.4}


@dataclass(frozen=True)
class Subject:
    engine: Any
    tokenizer: Any
    reference: Any  # a transformers causal LM with the engine's weights, float32
    logprob_atol: float  # the largest gap allowed between one token's log-probs


def chat_of(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def chat(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question {i}: what is {i} plus {i}?"}]


def reference_logprobs(subject: Subject, out: Any, temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) of each completion token under the float32 reference model."""
    ids = torch.tensor([out.prompt_ids + out.completion_ids])
    with torch.no_grad():
        logits = subject.reference(ids).logits[0, len(out.prompt_ids) - 1 : -1].float()
    scores = torch.log_softmax(logits / (temperature or 1.0), -1)
    return scores.gather(-1, torch.tensor(out.completion_ids)[:, None])[:, 0]


async def answers_chat_messages(subject: Subject) -> None:
    out = await subject.engine.generate(chat(1), sampling=GREEDY)
    assert out.prompt_ids == render_prompt_ids(subject.tokenizer, chat(1))
    assert 0 < len(out.completion_ids) <= GREEDY.max_tokens
    assert len(out.logprobs) == len(out.completion_ids)
    assert all(lp <= 0.0 for lp in out.logprobs)
    assert out.finish_reason in ("stop", "length")
    assert out.text == subject.tokenizer.decode(out.completion_ids, skip_special_tokens=True)
    assert isinstance(out.policy_version, int)


async def token_ids_in_match_messages_in(subject: Subject) -> None:
    from_messages = await subject.engine.generate(chat(2), sampling=GREEDY)
    from_ids = await subject.engine.generate(prompt_ids=from_messages.prompt_ids, sampling=GREEDY)
    assert from_ids.completion_ids == from_messages.completion_ids
    assert from_ids.prompt_ids == from_messages.prompt_ids


async def max_tokens_ends_with_length(subject: Subject) -> None:
    out = await subject.engine.generate(chat(3), sampling=SamplingParams(max_tokens=4, seed=0))
    assert len(out.completion_ids) == 4 and out.finish_reason == "length"


async def stop_strings_cut_the_text(subject: Subject) -> None:
    sampling = SamplingParams(temperature=0.0, max_tokens=16)
    free = await subject.engine.generate(chat(4), sampling=sampling)
    stop = free.text[5:8]
    assert len(stop) == 3, f"the premise: a longer answer ({free.text!r})"
    cut = await subject.engine.generate(
        chat(4), sampling=SamplingParams(temperature=0.0, max_tokens=16, stop=(stop,))
    )
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.find(stop)]


async def logprobs_match_a_forward_pass(subject: Subject, temperature: float) -> None:
    sampling = SamplingParams(temperature=temperature, max_tokens=12, seed=3)
    out = await subject.engine.generate(chat(5), sampling=sampling)
    expected = reference_logprobs(subject, out, temperature)
    gap = (torch.tensor(out.logprobs) - expected).abs().max().item()
    assert gap <= subject.logprob_atol, f"log-prob gap {gap:.4g} > {subject.logprob_atol}"


async def seeded_sampling_is_reproducible(subject: Subject) -> None:
    def seeded(seed: int) -> SamplingParams:
        return SamplingParams(temperature=1.0, max_tokens=10, seed=seed)

    first = await subject.engine.generate(chat(6), sampling=seeded(11))
    again = await subject.engine.generate(chat(6), sampling=seeded(11))
    other = await subject.engine.generate(chat(6), sampling=seeded(12))
    assert first.completion_ids == again.completion_ids
    assert first.completion_ids != other.completion_ids


async def concurrent_requests_are_each_scored_right(subject: Subject) -> None:
    """Requests batched together each get their own prompt and log-probs that match a
    forward pass of their own tokens (batching may change which near-tie wins, not the
    scores)."""
    together = await asyncio.gather(
        *(subject.engine.generate(chat(i), sampling=GREEDY) for i in range(8))
    )
    for i, out in enumerate(together):
        assert out.prompt_ids == render_prompt_ids(subject.tokenizer, chat(i))
        gap = (torch.tensor(out.logprobs) - reference_logprobs(subject, out, 0.0)).abs().max()
        assert gap.item() <= subject.logprob_atol, f"request {i}: log-prob gap {gap:.4g}"


# Prompt tokens a crowd carries past an engine with no step budget of its own (the local
# engine prefills whatever arrives together): enough to prefill several long prompts at once.
UNBUDGETED_CROWD_TOKENS = 1024


def step_token_budget(engine: Any) -> int | None:
    """The most prompt tokens `engine` reads in one step (vLLM's ``max_num_batched_tokens``),
    or None for an engine without such a budget."""
    settings = getattr(engine, "settings", None)
    if settings is None or not hasattr(settings, "engine_args"):
        return None
    return settings.engine_args().get("max_num_batched_tokens")


async def a_crowd_of_long_seeded_prompts_is_served(subject: Subject) -> None:
    """More prompt tokens at once than an engine reads in one step, each request seeded:
    all are answered (vLLM's CPU build died here when it split a seeded prompt)."""
    long_question = "Explain, step by step and with care, " + "why the sky looks blue. " * 50
    per_prompt = len(render_prompt_ids(subject.tokenizer, chat_of(long_question)))
    crowd_tokens = step_token_budget(subject.engine) or UNBUDGETED_CROWD_TOKENS
    crowd = crowd_tokens // per_prompt + 1
    outs = await asyncio.gather(
        *(
            subject.engine.generate(
                chat_of(f"{i}. {long_question}"),
                sampling=SamplingParams(temperature=1.0, max_tokens=4, seed=i),
            )
            for i in range(crowd)
        )
    )
    assert all(len(out.completion_ids) == 4 for out in outs)
    assert sum(len(out.prompt_ids) for out in outs) > crowd_tokens


async def bad_requests_get_clear_errors(subject: Subject) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        await subject.engine.generate(chat(1), prompt_ids=[1, 2])
    with pytest.raises(EngineError) as error:
        await subject.engine.generate(prompt_ids=[5] * 9000, sampling=GREEDY)
    message = str(error.value)
    assert isinstance(error.value, ContextOverflow) or "does not fit" in message, message


CHECKS = {
    "answers_chat_messages": answers_chat_messages,
    "token_ids_in_match_messages_in": token_ids_in_match_messages_in,
    "max_tokens_ends_with_length": max_tokens_ends_with_length,
    "stop_strings_cut_the_text": stop_strings_cut_the_text,
    "logprobs_match_at_temperature_1": lambda s: logprobs_match_a_forward_pass(s, 1.0),
    "logprobs_match_at_temperature_0.7": lambda s: logprobs_match_a_forward_pass(s, 0.7),
    "seeded_sampling_is_reproducible": seeded_sampling_is_reproducible,
    "concurrent_requests_are_each_scored_right": concurrent_requests_are_each_scored_right,
    "a_crowd_of_long_seeded_prompts_is_served": a_crowd_of_long_seeded_prompts_is_served,
    "bad_requests_get_clear_errors": bad_requests_get_clear_errors,
}
