"""The MCP env's action grammar: tool calls or a final answer, parsed into plain data.

* ``<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>`` - one or more
  (parallel calls); the closing tag may be missing at the very end of the reply.
* OpenAI-style JSON as the whole reply: ``{"name": ..., "arguments": {...}}``, a list of
  those, ``{"tool_calls": [{"function": {"name": ..., "arguments": "<json>"}}]}`` or an
  assistant message holding ``tool_calls``. ``arguments`` may be an object or a JSON string.
* Anything else is a final answer: the text inside ``<answer>...</answer>`` when present,
  otherwise the whole reply. Text up to a closing ``</think>`` is ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedAction:
    """Exactly one of: tool calls, a final answer, or an error saying what was malformed."""

    tool_calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    error: str | None = None


class _Malformed(ValueError):
    pass


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise _Malformed(
            f"{what} is not valid JSON ({error.msg} at character {error.pos})"
        ) from error
    except RecursionError as error:  # e.g. "[[[[..." 100,000 deep
        raise _Malformed(f"{what} is nested too deeply to be a tool call") from error


def _arguments(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        raw = _load_json(raw, "the arguments string") if raw.strip() else {}
    if not isinstance(raw, dict):
        raise _Malformed(f"arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def _call(data: Any) -> ToolCall:
    if not isinstance(data, dict):
        raise _Malformed(f"a tool call must be a JSON object, got {type(data).__name__}")
    if isinstance(data.get("function"), dict):  # OpenAI: {"type": "function", "function": {...}}
        data = data["function"]
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _Malformed('a tool call needs a "name" string')
    return ToolCall(name.strip(), _arguments(data.get("arguments", data.get("parameters"))))


def _calls_from_json(data: Any) -> list[ToolCall]:
    if isinstance(data, dict) and "tool_calls" in data:
        data = data["tool_calls"]
    items = data if isinstance(data, list) else [data]
    if not items:
        raise _Malformed("the list of tool calls is empty")
    return [_call(item) for item in items]


def _looks_like_openai_json(text: str) -> Any:
    """The reply parsed as JSON when it is an OpenAI-style call, else None."""
    if not text.startswith(("{", "[")):
        return None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    items = data.get("tool_calls", [data]) if isinstance(data, dict) else data
    if (
        isinstance(items, list)
        and items
        and all(isinstance(item, dict) and ("name" in item or "function" in item) for item in items)
    ):
        return data
    return None


def parse_action(text: str) -> ParsedAction:
    """Parse what the model wrote (see the module docstring)."""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    stripped = text.strip()
    try:
        blocks = TOOL_CALL_TAG.findall(stripped)
        if blocks:
            calls = []
            for index, block in enumerate(blocks, 1):
                calls.append(_call(_load_json(block.strip(), f"tool call {index}")))
            return ParsedAction(tool_calls=tuple(calls))
        data = _looks_like_openai_json(stripped)
        if data is not None:
            return ParsedAction(tool_calls=tuple(_calls_from_json(data)))
    except _Malformed as error:
        return ParsedAction(error=str(error))
    answers = ANSWER_TAG.findall(stripped)
    return ParsedAction(answer=(answers[-1] if answers else stripped).strip())
