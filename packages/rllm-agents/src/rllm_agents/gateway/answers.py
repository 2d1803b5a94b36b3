"""From an engine's ModelOutput to the choice a client gets: tool calls and token texts.

Engines behind an OpenAI-compatible server may return structured ``tool_calls`` already; they
are passed on (with an ``id`` and ``type`` filled in where the server left them out). Engines
that return text only (the local engine, vLLM in-process, a completions endpoint) write tool
calls as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, the form the
project's chat templates teach; when the request offered tools, those blocks are parsed into
OpenAI ``tool_calls`` and taken out of the content, and the finish reason becomes
``tool_calls``. A malformed block stays in the content, as the model wrote it.
"""

from __future__ import annotations

import uuid
from typing import Any

from rllm_agents.chat.tool_calls import TOOL_CALL_BLOCK, parse_tool_calls
from rllm_agents.engines.base import ModelOutput
from rllm_agents.gateway.openai_replies import Choice


def chat_choice(
    output: ModelOutput, *, parse_tools: bool, tokenizer: Any = None, token_texts: bool = False
) -> Choice:
    tool_calls = [_with_id(call) for call in output.tool_calls]
    content: str | None = output.text
    if not tool_calls and parse_tools:
        parsed = parse_tool_calls(output.text)
        if parsed:
            tool_calls = [call.to_openai() | {"id": _call_id()} for call in parsed]
            content = TOOL_CALL_BLOCK.sub("", output.text).strip() or None
    finish_reason = output.finish_reason
    if tool_calls and finish_reason == "stop":
        finish_reason = "tool_calls"
    return Choice(
        output=output,
        content=content,
        tool_calls=tool_calls,
        finish_reason=finish_reason,
        token_texts=_token_texts(tokenizer, output) if token_texts else None,
    )


def text_choice(output: ModelOutput, *, tokenizer: Any = None, token_texts: bool = False) -> Choice:
    return Choice(
        output=output,
        content=output.text,
        finish_reason=output.finish_reason,
        token_texts=_token_texts(tokenizer, output) if token_texts else None,
    )


def _with_id(call: dict[str, Any]) -> dict[str, Any]:
    return {**call, "id": call.get("id") or _call_id(), "type": call.get("type") or "function"}


def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _token_texts(tokenizer: Any, output: ModelOutput) -> list[str]:
    """Each completion token's text (for logprobs), or "" per logprob without a tokenizer."""
    if tokenizer is None or len(output.completion_ids) != len(output.logprobs):
        return [""] * len(output.logprobs)
    return [
        tokenizer.decode([token], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        for token in output.completion_ids
    ]
