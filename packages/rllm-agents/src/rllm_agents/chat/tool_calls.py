"""Tool-call parsing: ``<tool_call>{json}</tool_call>`` blocks in text, and OpenAI ``tool_calls``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(?P<body>.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call of a named tool with JSON-object arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None

    def to_openai(self, index: int = 0) -> dict[str, Any]:
        """The call in OpenAI's ``tool_calls`` format (arguments as a JSON string)."""
        return {
            "id": self.id or f"call_{index}",
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


def _arguments_object(raw: Any) -> dict[str, Any] | None:
    """Arguments as a dict; OpenAI sends them as a JSON string. None when unreadable."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return None
    return raw if isinstance(raw, dict) else None


def _call_from_object(obj: Any, call_id: str | None = None) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # OpenAI: {"id", "type", "function": {...}}
        return _call_from_object(obj["function"], obj.get("id", call_id))
    name = obj.get("name")
    arguments = _arguments_object(obj.get("arguments", obj.get("parameters")))
    if not isinstance(name, str) or not name or arguments is None:
        return None
    return ToolCall(name=name, arguments=arguments, id=call_id or obj.get("id"))


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every well-formed ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in `text`.

    Blocks whose body is not a JSON object with a name are skipped: a model's broken call is
    the env's business (it reports it to the agent), not a parser crash.
    """
    calls = []
    for match in TOOL_CALL_BLOCK.finditer(text or ""):
        try:
            obj = json.loads(match.group("body"))
        except json.JSONDecodeError:
            continue
        call = _call_from_object(obj)
        if call is not None:
            calls.append(call)
    return calls


def parse_openai_tool_calls(tool_calls: list[dict[str, Any]] | None) -> list[ToolCall]:
    """Structured ``tool_calls`` from an OpenAI-compatible response (unreadable ones skipped)."""
    calls = [_call_from_object(item) for item in tool_calls or []]
    return [call for call in calls if call is not None]


def tool_calls_to_text(calls: list[ToolCall]) -> str:
    """Calls written back as ``<tool_call>`` blocks (the form text envs read)."""
    return "\n".join(
        "<tool_call>" + json.dumps({"name": c.name, "arguments": c.arguments}) + "</tool_call>"
        for c in calls
    )
