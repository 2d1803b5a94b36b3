"""Turning an engine's input (chat messages or token ids) into prompt token ids."""

from __future__ import annotations

from typing import Any


def check_one_prompt(messages: Any, prompt_ids: Any) -> None:
    if (messages is None) == (prompt_ids is None):
        raise ValueError("pass exactly one of messages or prompt_ids")


def render_chat_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
    """The generation prompt for `messages` under the tokenizer's chat template, as token ids."""
    # Render to text first: apply_chat_template(tokenize=True) changed its return type across
    # transformers versions, while encode(text) of the rendered string is the same everywhere.
    text = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def prompt_ids_for(
    tokenizer: Any, messages: Any, prompt_ids: list[int] | None, tools: Any = None
) -> list[int]:
    """`prompt_ids` as given, or `messages` rendered with the chat template."""
    check_one_prompt(messages, prompt_ids)
    if prompt_ids is not None:
        return list(prompt_ids)
    return render_chat_ids(tokenizer, messages, tools)
