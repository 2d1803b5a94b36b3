"""The SWE env's action grammar: tool calls (the tool envs' format) or one bash block.

* Tool calls, parsed exactly as ``rllm/MCP-v0`` parses them
  (:func:`rllm_envs.mcp.actions.parse_action`): ``<tool_call>{"name": "bash", "arguments":
  {"command": "ls"}}</tool_call>`` blocks (several run in order) or OpenAI-style JSON.
* Otherwise exactly one fenced ```` ```bash ```` block (mini-swe-agent's style): its content is
  a ``bash`` call; a block holding only ``submit`` submits.

Tools: ``bash``, ``view``, ``str_replace``, ``create``, ``search``, ``submit`` (schemas in
:data:`TOOL_SCHEMAS`, the OpenAI function format the chat templates take).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rllm_envs.mcp.actions import ToolCall, parse_action

SUBMIT = "submit"
MAX_CALLS_PER_TURN = 8
_BASH_BLOCK = re.compile(r"```(?:bash|sh|shell)[ \t]*\n(.*?)```", re.DOTALL)


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


_PATH = {"type": "string", "description": "a path, relative to the repository root"}
TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    _function(
        "bash",
        "Run a bash command in the repository root. Each command runs in a fresh shell (cd and "
        "variables do not carry over; background processes are stopped when it ends). Long "
        "output is cut in the middle. There is no network.",
        {"command": {"type": "string", "description": "the command line"}},
        ["command"],
    ),
    _function(
        "view",
        "Show a file with line numbers (optionally a range of lines), or list a directory "
        "two levels deep.",
        {
            "path": _PATH,
            "start_line": {"type": "integer", "description": "first line to show (from 1)"},
            "end_line": {"type": "integer", "description": "last line to show (-1: the end)"},
        },
        ["path"],
    ),
    _function(
        "str_replace",
        "Replace old_str by new_str in a file. old_str must occur exactly once (include enough "
        "surrounding lines to make it unique); whitespace counts.",
        {
            "path": _PATH,
            "old_str": {"type": "string", "description": "the exact text to replace"},
            "new_str": {"type": "string", "description": "the text to put instead"},
        },
        ["path", "old_str", "new_str"],
    ),
    _function(
        "create",
        "Create a new file with the given content (refuses to overwrite an existing file).",
        {"path": _PATH, "content": {"type": "string", "description": "the whole file"}},
        ["path", "content"],
    ),
    _function(
        "search",
        "Find lines containing a literal string in the files under a path (default: the "
        "whole repository).",
        {
            "pattern": {"type": "string", "description": "the text to look for"},
            "path": {"type": "string", "description": "file or folder to search (default .)"},
        },
        ["pattern"],
    ),
    _function(
        SUBMIT,
        "Submit the current state of the repository as your fix. The episode ends and the "
        "hidden tests decide the reward.",
        {},
        [],
    ),
)
_SCHEMAS_BY_NAME: Mapping[str, dict[str, Any]] = {
    schema["function"]["name"]: schema["function"]["parameters"] for schema in TOOL_SCHEMAS
}
_JSON_TYPES: Mapping[str, type | tuple[type, ...]] = {"string": str, "integer": int}

FORMAT_HELP = (
    'Call tools with <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call> '
    "(several calls in one reply run in order), or reply with exactly one ```bash``` block "
    'holding a command. When your fix is done, call submit (<tool_call>{"name": "submit", '
    '"arguments": {}}</tool_call>, or a ```bash``` block holding only: submit).'
)


@dataclass(frozen=True)
class SWEActions:
    """The calls of one turn, in order, or what was wrong with the reply."""

    calls: tuple[ToolCall, ...] = ()
    error: str | None = None
    from_bash_block: bool = False


def argument_error(call: ToolCall) -> str | None:
    """What is wrong with a call's name or arguments, or None."""
    schema = _SCHEMAS_BY_NAME.get(call.name)
    if schema is None:
        return f"unknown tool {call.name!r}; the tools are {sorted(_SCHEMAS_BY_NAME)}"
    properties = schema["properties"]
    missing = [name for name in schema["required"] if name not in call.arguments]
    if missing:
        return f"{call.name}: missing argument(s) {missing}"
    unknown = [name for name in call.arguments if name not in properties]
    if unknown:
        return f"{call.name}: unknown argument(s) {unknown}; it takes {sorted(properties)}"
    for name, value in call.arguments.items():
        wanted = _JSON_TYPES[properties[name]["type"]]
        if not isinstance(value, wanted) or isinstance(value, bool):
            return f"{call.name}: {name} must be a {properties[name]['type']}"
    return None


def parse_swe_action(text: str) -> SWEActions:
    """Parse what the model wrote (see the module docstring)."""
    parsed = parse_action(text)
    if parsed.error is not None:
        return SWEActions(error=f"invalid tool call: {parsed.error}")
    if parsed.tool_calls:
        calls = parsed.tool_calls
        if len(calls) > MAX_CALLS_PER_TURN:
            return SWEActions(
                error=f"{len(calls)} tool calls in one reply; the limit is {MAX_CALLS_PER_TURN}"
            )
        for call in calls:
            problem = argument_error(call)
            if problem:
                return SWEActions(error=problem)
        return SWEActions(calls)
    visible = text.rsplit("</think>", 1)[-1]
    blocks = _BASH_BLOCK.findall(visible)
    if len(blocks) == 1 and blocks[0].strip():
        command = blocks[0].strip()
        if command == SUBMIT:
            return SWEActions((ToolCall(SUBMIT, {}),), from_bash_block=True)
        return SWEActions((ToolCall("bash", {"command": command}),), from_bash_block=True)
    if len(blocks) > 1:
        return SWEActions(error=f"{len(blocks)} ```bash``` blocks in one reply; write one")
    return SWEActions(error="no tool call and no ```bash``` block found")
