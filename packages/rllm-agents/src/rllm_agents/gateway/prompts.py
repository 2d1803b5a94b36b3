"""Prompt token ids for a session's next chat call: the template's text, the model's own tokens.

A program sends its whole conversation every call, and the chat template renders it to text.
Tokenising that text afresh would put a re-tokenisation of the model's earlier replies into
the prompt - equal text, often other tokens - so the prompt would not extend the tokens the
model generated and no multi-turn training sequence would hold both. So, for a session:

* the messages are rendered with the template as usual (the template decides what the model
  sees: a template that drops earlier ``<think>`` blocks drops them);
* when that text starts with the full text of an earlier call - its prompt followed by its
  completion - the prompt is that call's token ids followed by the tokenised rest: the model's
  own tokens are kept, and the new prompt extends the old sequence token for token;
* otherwise (the template or the program rewrote history) the text is tokenised as is, and
  the call starts a new sequence (see :mod:`rllm_agents.gateway.trajectories`).

Either way the recorded prompt is exactly what the engine was given. The longest matching
earlier call wins, so ``n > 1`` choices and interleaved conversations in one session each
continue their own branch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rllm_agents.chat.tito import encode, render_text
from rllm_agents.gateway.sessions import ModelContext


@dataclass(frozen=True)
class RenderedPrompt:
    ids: list[int]
    text: str
    extends: int | None = None  # index of the call whose tokens were reused


def render_chat_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    contexts: Iterable[ModelContext] = (),
) -> RenderedPrompt:
    """The prompt ids for `messages`, reusing an earlier call's ids where the text allows."""
    text = render_text(tokenizer, messages, tools=tools, add_generation_prompt=True)
    base = longest_prefix(contexts, text)
    if base is None:
        return RenderedPrompt(encode(tokenizer, text), text)
    rest = text[len(base.text) :]
    ids = base.ids + encode(tokenizer, rest) if rest else list(base.ids)
    return RenderedPrompt(ids, text, base.call_index)


def longest_prefix(contexts: Iterable[ModelContext], text: str) -> ModelContext | None:
    best = None
    for context in contexts:
        longer = best is None or len(context.text) > len(best.text)
        if longer and context.text and text.startswith(context.text):
            best = context
    return best


def context_after(
    tokenizer: Any, call_index: int, prompt: RenderedPrompt, completion_ids: list[int]
) -> ModelContext | None:
    """What the model is left with after generating `completion_ids` for `prompt`."""
    if not completion_ids:
        return None
    completion_text = tokenizer.decode(
        completion_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    return ModelContext(call_index, prompt.text + completion_text, prompt.ids + completion_ids)
