"""Prompt log-probs: an engine's log-prob of each token of a sequence it is *given*.

``RolloutEngine.generate`` reports log-probs of the tokens an engine samples itself. Scoring a
sequence someone else wrote - a teacher reading a student's episode (on-policy distillation,
``rllm_train.native.served_teacher``) - needs the other direction, which some engines have as
an optional capability (:class:`PromptScorer`):

* ``LocalEngine``: one forward pass of its transformers model
  (:func:`transformers_prompt_logprobs`), or of llama.cpp in this process when it serves a
  ``LlamaCppModel`` (``engines/llamacpp/scoring.py``); either way between two decoding steps,
  as a weight swap is, so a scoring never races the engine's own batch.
* ``ProcessEngine``: the same, in its child process.
* ``VLLMEngine``: vLLM's ``prompt_logprobs`` on a token prompt, one token generated.
* ``OpenAIEngine`` (and ``VLLMServerEngine``, through it): ``/completions`` with ``echo`` and
  ``logprobs``, or vLLM's ``prompt_logprobs`` field (``engines/openai_scoring.py``).

Every engine answers at temperature 1: the log-softmax of the model's raw logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from rllm_agents.engines.base import ContextOverflow, PromptRejected


@runtime_checkable
class PromptScorer(Protocol):
    """An engine that scores given token sequences (see the module doc)."""

    async def prompt_logprobs(self, token_ids: Sequence[int], start: int = 1) -> list[float | None]:
        """``log p(x_t | x_<t)`` for ``t = start .. len(token_ids) - 1``: one value per token
        from `start` on. Tokens before `start` are read as context only, which lets an engine
        skip the vocabulary projection there (or reuse a cached prefix). None where the engine
        gives no value for a token (llama-cpp-python's server leaves out every token equal to
        its BOS id); the in-process engines and vLLM always give one."""
        ...


def scores_prompts(engine: Any) -> bool:
    """Whether `engine` has the prompt log-probs capability."""
    return isinstance(engine, PromptScorer)


def checked_request(
    token_ids: Sequence[int], start: int, context_length: int | None = None
) -> list[int]:
    """`token_ids` as a list, refused when there is nothing to score or it does not fit."""
    ids = [int(token) for token in token_ids]
    if not 1 <= start < len(ids):
        raise PromptRejected(
            f"prompt log-probs from token {start} of a {len(ids)}-token sequence: the first "
            "scored token needs one before it, and one token at least must be scored"
        )
    if context_length is not None and len(ids) > context_length:
        raise ContextOverflow(
            f"a sequence of {len(ids)} tokens does not fit the model context "
            f"({context_length} tokens)"
        )
    return ids


def picked_logprobs(logits: Any, targets: Any) -> Any:
    """``log_softmax(logits)[i, targets[i]]`` for each row, without the whole log-softmax:
    (rows, vocabulary) logits, (rows,) targets."""
    import torch

    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def transformers_prompt_logprobs(
    model: Any, token_ids: list[int], start: int, device: Any, autocast_dtype: Any = None
) -> list[float]:
    """A transformers causal LM's prompt log-probs of `token_ids` from `start` on, in one
    forward pass that projects only the positions predicting those tokens onto the
    vocabulary (``logits_to_keep``; the prompt before them is most of a long episode)."""
    import contextlib

    import torch

    ids = torch.tensor([token_ids], device=device)
    kept = len(token_ids) - start + 1  # the positions start-1 .. n-1; the last predicts nothing
    autocast = (
        torch.autocast(torch.device(device).type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    with torch.inference_mode(), autocast:
        logits = model(input_ids=ids, use_cache=False, logits_to_keep=kept).logits[0, :-1]
    return picked_logprobs(logits, ids[0, start:]).tolist()
