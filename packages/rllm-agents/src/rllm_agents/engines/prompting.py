"""Turning an engine's input (chat messages or token ids) into prompt token ids."""

from __future__ import annotations

from typing import Any

from rllm_agents.chat.tito import render_prompt_ids


def check_one_prompt(messages: Any, prompt_ids: Any) -> None:
    if (messages is None) == (prompt_ids is None):
        raise ValueError("pass exactly one of messages or prompt_ids")


def prompt_ids_for(
    tokenizer: Any, messages: Any, prompt_ids: list[int] | None, tools: Any = None
) -> list[int]:
    """`prompt_ids` as given, or `messages` rendered with the chat template."""
    check_one_prompt(messages, prompt_ids)
    if prompt_ids is not None:
        return list(prompt_ids)
    return render_prompt_ids(tokenizer, messages, tools)
