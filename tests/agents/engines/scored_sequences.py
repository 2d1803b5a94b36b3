"""Token sequences to score (prompt log-probs, rllm_agents.engines.scoring), and what the float32
transformers model gives them: what every engine's answer is held to.

The sequences are what a distillation teacher reads: chats rendered by SmolLM2's template, one
with several turns and characters made of several tokens, and one whose ids are not how the
tokenizer would write its text (a student may sample any ids)."""

from __future__ import annotations

import math

import torch

CHATS = [
    [
        {"role": "system", "content": "You are a calculator."},
        {"role": "user", "content": "What is 3 + 4?"},
        {"role": "assistant", "content": "3 + 4 = 7. The answer is \\boxed{7}."},
    ],
    [
        {"role": "user", "content": "Name a city in Japan, then spell it in kanji."},
        {"role": "assistant", "content": "Kyoto: 京都. Its name means 'capital city'."},
        {"role": "user", "content": "And one café in Paris? 🙂"},
        {"role": "assistant", "content": "Café de Flore, on the boulevard Saint-Germain."},
    ],
]
SCORED_FROM = 12  # the first scored token of each sequence (the rest is context)
# vLLM's largest and mean gap per token from the float32 transformers model, by the dtype vLLM
# computes in. Prompt tokens are scored however unlikely (log-probs down to -15), where
# bfloat16's 8-bit mantissa is coarsest: measured here in bfloat16 0.50 and 0.039 (sampled
# tokens: conformance.VLLM_LOGPROB_ATOL); float32 is exact to rounding.
VLLM_PROMPT_TOLERANCE = {"float32": (2e-3, 5e-4), "bfloat16": (1.0, 0.1)}


def scored_sequences(tokenizer) -> list[list[int]]:
    """The chats as token ids, and the first one again with three one-letter tokens ("a", "n",
    "s") put into its reply, which the tokenizer would write as one ("ans")."""
    sequences = [tokenizer.apply_chat_template(chat, tokenize=False) for chat in CHATS]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in sequences]
    unusual = ids[0][:-4] + tokenizer.convert_tokens_to_ids(["a", "n", "s"]) + ids[0][-4:]
    return [*ids, unusual]


def canonical(tokenizer, token_ids: list[int]) -> bool:
    """Whether `token_ids` are what the tokenizer makes of their own text."""
    text = tokenizer.decode(token_ids, skip_special_tokens=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"] == token_ids


@torch.no_grad()
def reference_logprobs(model, token_ids: list[int], start: int) -> list[float]:
    """The float32 transformers model's log p(x_t | x_<t) for t = start .. n - 1."""
    logits = model(torch.tensor([token_ids])).logits[0].float()
    scores = torch.log_softmax(logits[start - 1 : -1], dim=-1)
    return scores.gather(-1, torch.tensor(token_ids[start:])[:, None])[:, 0].tolist()


def gaps(answer: list[float | None], reference: list[float]) -> tuple[float, float, int]:
    """(largest, mean |answer - reference|, tokens without an answer)."""
    assert len(answer) == len(reference)
    pairs = [(a, r) for a, r in zip(answer, reference, strict=True) if a is not None]
    assert all(math.isfinite(a) and a <= 1e-6 for a, _ in pairs)
    differences = [abs(a - r) for a, r in pairs]
    return max(differences), sum(differences) / len(differences), len(answer) - len(pairs)
