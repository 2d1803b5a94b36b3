"""Prompt log-probs from llama.cpp in this process: a ``LlamaCppModel`` reads a given sequence
and keeps the logits of the positions that predict the scored tokens (engines/scoring.py).

It goes through the model's own sequences, so a scored sequence is a prefix cache like a
finished conversation: the next sequence that starts with the same tokens (another sample of
the same task, the next turn of the same episode) copies those cells and reads only what
follows. Only context is taken from the cache - the tokens before `start`, whose logits
nobody asked for - so each scored token's logits come from this very read.

Tokens go in as ids, exactly as given: llama-cpp-python's OpenAI server takes text prompts
only, which it tokenizes again (possibly otherwise than the student did), and sorts the whole
vocabulary in Python for every echoed token (about 35 ms a token for SmolLM2 on 2 cores);
here 257 tokens take about 0.7 s at F16, as long as transformers' forward pass.
"""

from __future__ import annotations

from typing import Any


def prompt_logprobs(model: Any, token_ids: list[int], start: int) -> list[float]:
    """`model`'s (a LlamaCppModel's) log-prob of ``token_ids[t]`` for ``t >= start``."""
    import numpy as np
    import torch

    from rllm_agents.engines.scoring import picked_logprobs

    last = len(token_ids) - 1  # the last position predicts nothing
    # At most the tokens before `start` come from a cached prefix: position start - 1, whose
    # logits predict token `start`, is always read here.
    sequence = model._claim(token_ids[:start])
    try:
        cached = len(sequence.tokens)
        model.prompt_reads.reused += cached
        model.prompt_reads.read += len(token_ids) - cached
        items = [
            (token, position, sequence, 0, start - 1 <= position < last)
            for position, token in enumerate(token_ids[cached:], start=cached)
        ]
        values: list[float] = []
        # One llama_decode per chunk (at most its batch size, 512 tokens): the logits of the
        # chunk's wanted positions are rows of one array, at most 512 x the vocabulary.
        for chunk in model._chunks(items):
            wanted = [item[1] for item in chunk if item[4]]
            rows = iter(range(len(wanted)))
            numbered = [(t, p, s, next(rows) if w else 0, w) for t, p, s, _, w in chunk]
            logits = np.empty((len(wanted), model._require().n_vocab), dtype=np.float32)
            model._decode(numbered, logits)
            if wanted:
                targets = torch.tensor([token_ids[position + 1] for position in wanted])
                values += picked_logprobs(torch.from_numpy(logits), targets).tolist()
    except BaseException:
        model._drop(sequence)  # half read: its cells are no prefix of anything
        raise
    model._finish_sequences([sequence.seq_id])
    return values
