"""Prompt log-probs from an OpenAI-compatible server (``OpenAIEngine.prompt_logprobs``;
engines/scoring.py): what to ask for, and reading the answer back onto the given tokens.

The request is ``/completions`` with the tokens as the prompt and one of two asks, tried in
this order until the server answers one (the engine remembers which):

1. ``echo: true, logprobs: 0``: the completions API's own way. The answer's
   ``choices[0].logprobs.token_logprobs`` starts with the prompt's tokens (the first null: it
   has no context), then the generated one.
2. ``prompt_logprobs: 0``: vLLM's field. ``choices[0].prompt_logprobs`` holds, per prompt
   token, ``{"<token id>": {"logprob": ...}}`` (null first).

``max_tokens`` is 1: llama-cpp-python reads 0 as "no limit". Temperature 1: every server
tested echoes the raw model's log-probs.

What servers do (measured, SmolLM2):

* vLLM's server takes the token ids as the prompt and answers either ask, for every token,
  in the order given.
* llama-cpp-python's server takes text only, so the prompt is sent detokenised
  (engines/openai.py) and its echo is matched back to the given tokens piece by piece
  (:func:`aligned`): it skips the first token and every token equal to its BOS id (SmolLM2's
  ``<|im_start|>``, which opens every chat turn), which then get no value (None), and a
  sequence it tokenises otherwise is refused, since its log-probs would be of other tokens. It
  echoes log-probs only for a model loaded with ``logits_all`` (its server's default, ``--logits_all
  true``; off, it answers HTTP 500 "logprobs is not supported for models created with
  logits_all=False"), and sorts the whole vocabulary in Python for every echoed token.
* A server that answers neither (a hosted chat API) is named in an EngineError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rllm_agents.engines.base import EngineError

# What each ask adds to the /completions request (see the module doc), in the order tried.
ASKS: tuple[dict[str, Any], ...] = (
    {"echo": True, "logprobs": 0, "max_tokens": 1, "temperature": 1.0},
    {"prompt_logprobs": 0, "max_tokens": 1, "temperature": 1.0},
)
UNREADABLE = "\ufffd"  # a token that is part of a character decodes to this on its own


def answered_logprobs(
    choice: dict[str, Any], token_ids: list[int], text: TextPrompt | None
) -> list[float | None] | None:
    """The log-prob of each of `token_ids` (None at position 0 and where the server gives
    none) from one answer's first choice; None when it holds no prompt log-probs.

    `text` when the prompt went as text: the server tokenised it itself, and its echo is
    matched back to the tokens (:func:`aligned`)."""
    echoed = choice.get("logprobs") or {}
    values = echoed.get("token_logprobs") or []
    if text is not None and values:
        return aligned(token_ids, text, list(echoed.get("tokens") or []), values)
    if len(values) >= len(token_ids):
        served = choice.get("prompt_token_ids")
        if served and list(served) != token_ids:
            raise EngineError("the server echoed other prompt tokens than it was sent")
        return [None, *(_number(value) for value in values[1 : len(token_ids)])]
    return _prompt_logprobs_field(choice, token_ids)


def _prompt_logprobs_field(
    choice: dict[str, Any], token_ids: list[int]
) -> list[float | None] | None:
    """vLLM's ``prompt_logprobs``: per position, the token's id (as text) -> its log-prob."""
    field = choice.get("prompt_logprobs")
    if not field or len(field) != len(token_ids):
        return None
    values: list[float | None] = [None]
    for token, entry in zip(token_ids[1:], field[1:], strict=True):
        found = (entry or {}).get(str(token))
        values.append(_number(found.get("logprob")) if isinstance(found, dict) else None)
    return values


@dataclass(frozen=True)
class TextPrompt:
    """A token sequence as a text-only server sees it: each token decoded alone, and the ids
    it may leave out of its echo (control tokens: llama-cpp-python drops its BOS id)."""

    pieces: list[str]
    control_ids: frozenset[int]

    @classmethod
    def of(cls, tokenizer: Any, token_ids: list[int]) -> TextPrompt:
        pieces = [
            tokenizer.decode([token], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            for token in token_ids
        ]
        return cls(pieces, frozenset(getattr(tokenizer, "all_special_ids", ()) or ()))


def aligned(
    token_ids: list[int], text: TextPrompt, echoed: list[str], values: list[Any]
) -> list[float | None]:
    """The echoed log-probs of a text prompt placed on the tokens they belong to.

    Token i takes the next echoed value when the server's piece reads as ours (a piece that is
    part of a character cannot be compared, and is taken as it comes; a control token may read
    as nothing: llama-cpp-python's ``<|im_end|>``); the first token, and a control token the
    server did not echo, get None. Anything else means the server tokenised
    the text otherwise than `token_ids`: an EngineError, since its values would be of other
    tokens. At most one echoed token may be left over: the one generated after the prompt."""
    placed: list[float | None] = [None] * len(token_ids)
    taken = 0
    for position, (token, piece) in enumerate(zip(token_ids, text.pieces, strict=True)):
        theirs = echoed[taken] if taken < len(echoed) else None
        control = token in text.control_ids
        if theirs is not None and (
            theirs == piece or UNREADABLE in piece or control and not theirs
        ):
            placed[position] = _number(values[taken])
            taken += 1
        elif position > 0 and not control:
            raise EngineError(
                f"the server tokenised the prompt otherwise than it was given: token {position} "
                f"is {piece!r}, the server read {theirs!r}, so its log-probs would be of other "
                "tokens (a server that takes token ids as the prompt, as vLLM's does, scores "
                "any sequence)"
            )
    if len(echoed) - taken > 1:
        raise EngineError(
            f"the server echoed {len(echoed)} tokens for a prompt of {len(token_ids)}: it "
            "tokenised the prompt otherwise than it was given"
        )
    return placed


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def no_logprobs_error(base_url: str, model: str) -> EngineError:
    return EngineError(
        f"{base_url} (model {model!r}) returned no prompt log-probs: a teacher's server must "
        "echo them (/completions with echo and logprobs: vLLM's server, or llama-cpp-python's "
        "with --logits_all true) or answer vLLM's prompt_logprobs"
    )
