"""Batched sampling from a Hugging Face causal LM: left-padded prompts in, tokens + logprobs out."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]
    logprobs: list[float]  # under the sampling distribution (temperature and top-p applied)
    finished: bool  # ended on a stop token (False: cut by the token budget)


def stop_token_ids(tokenizer) -> list[int]:
    """Every token that ends a model turn: eos plus the chat template's end-of-turn marker."""
    ids = {tokenizer.eos_token_id}
    for marker in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        token_id = tokenizer.convert_tokens_to_ids(marker)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            ids.add(token_id)
    return sorted(i for i in ids if i is not None)


@torch.no_grad()
def sample_batch(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    stop_ids: list[int],
    pad_id: int,
) -> list[Completion]:
    """One completion per prompt, all generated together (the torch RNG drives sampling)."""
    device = next(model.parameters()).device
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        attention[row, width - len(prompt) :] = 1
    greedy = temperature == 0
    output = model.generate(
        input_ids=input_ids.to(device),
        attention_mask=attention.to(device),
        max_new_tokens=max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_p=None if greedy else top_p,
        top_k=None,
        eos_token_id=stop_ids,
        pad_token_id=pad_id,
        output_scores=True,
        return_dict_in_generate=True,
    )
    generated = output.sequences[:, width:]
    # One position at a time: stacking the scores and taking a full log-softmax would hold two
    # more (batch, new tokens, vocab) copies, gigabytes for long replies over a 49k vocabulary.
    logprobs = torch.stack(
        [
            scores.float().gather(-1, generated[:, i, None]).squeeze(-1)
            - torch.logsumexp(scores.float(), dim=-1)
            for i, scores in enumerate(output.scores)
        ],
        dim=1,
    ).cpu()
    generated = generated.cpu()
    completions = []
    stops = set(stop_ids)
    for row in range(len(prompts)):
        tokens = generated[row].tolist()
        end = next((i + 1 for i, token in enumerate(tokens) if token in stops), None)
        kept = tokens[:end] if end is not None else tokens
        completions.append(
            Completion(kept, logprobs[row, : len(kept)].tolist(), finished=end is not None)
        )
    return completions
