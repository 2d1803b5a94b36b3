"""`ToolAgent`: an agent for tool-using envs such as ``rllm/MCP-v0``.

The env's tools (``info["tools"]``, OpenAI function format) go into the model's own
tool-calling chat template through :attr:`tools` (the engine passes them to
``apply_chat_template(..., tools=...)``). When the template ignores tools, the agent falls back
to a system prompt that lists the schemas and the ``<tool_call>`` format.

The model's reply goes to the env as written: the env parses ``<tool_call>{json}</tool_call>``
blocks (several = parallel calls) and OpenAI-style JSON. Calls an engine returns as structured
``tool_calls`` (OpenAI-compatible servers) are written out as ``<tool_call>`` blocks. Tool
results come back as one ``role: "tool"`` message per call when the template has tool
support, else as a user message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rllm_agents.agents.base import BaseAgent
from rllm_agents.chat.tool_calls import parse_openai_tool_calls, tool_calls_to_text
from rllm_agents.types import Action, Step, Trajectory

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant. Use the tools to find what you need, one or more calls at a "
    "time, then give the final answer as <answer>...</answer>."
)
FALLBACK_TOOL_PROMPT = (
    "\n\nYou have these tools (JSON schemas):\n{schemas}\n\nTo call tools, write one or more "
    '<tool_call>{{"name": "TOOL", "arguments": {{...}}}}</tool_call> blocks and stop; the '
    "results come back in the next message."
)
TOOL_RESPONSE = re.compile(
    r'<tool_response name="(?P<name>[^"]*)"(?: status="error")?>\n(?P<content>.*?)\n</tool_response>',
    re.DOTALL,
)
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "rllm_probe_tool_7f3a",
        "description": "probe",
        "parameters": {"type": "object", "properties": {}},
    },
}


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders the `tools` it is given."""
    messages = [{"role": "user", "content": "hi"}]
    try:
        rendered = tokenizer.apply_chat_template(
            messages, tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 - templates that reject `tools` have no tool support
        return False
    return _PROBE_TOOL["function"]["name"] in rendered


def tool_call_text(tool_calls: list[dict[str, Any]]) -> str:
    """Structured calls (OpenAI format) as the action text the env reads: ``<tool_call>``
    blocks, or - when some call is unreadable - the calls as OpenAI JSON, so that the env
    tells the model what was wrong with them instead of them being dropped."""
    calls = parse_openai_tool_calls(tool_calls)
    if len(calls) == len(tool_calls):
        return tool_calls_to_text(calls)
    return json.dumps({"tool_calls": tool_calls}, ensure_ascii=False)


def tool_messages(observation: str) -> list[dict[str, Any]] | None:
    """The env's ``<tool_response>`` blocks as ``role: "tool"`` messages, or None if there are
    none (then the observation goes in whole as a user message)."""
    matches = list(TOOL_RESPONSE.finditer(observation))
    if not matches:
        return None
    return [
        {"role": "tool", "name": match["name"], "content": match["content"]} for match in matches
    ]


class ToolAgent(BaseAgent):
    """Tool schemas in the chat template, replies as tool calls (see the module docstring)."""

    def __init__(
        self,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        *,
        tokenizer: Any = None,
        native_tools: bool | None = None,
    ) -> None:
        self.system_prompt = system_prompt
        # Without a tokenizer the engine (an OpenAI-compatible server) renders tools natively.
        if native_tools is None:
            native_tools = tokenizer is None or template_supports_tools(tokenizer)
        self.native_tools = native_tools
        self.reset()

    def reset(self) -> None:
        self._tools: list[dict[str, Any]] = []
        self._messages: list[dict[str, Any]] = []
        self._trajectory = Trajectory(name="tool_agent")

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return list(self._tools) if self.native_tools and self._tools else None

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        return [dict(message) for message in self._messages]

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    def _system_message(self) -> dict[str, Any]:
        content = self.system_prompt
        if self._tools and not self.native_tools:
            schemas = "\n".join(
                json.dumps(tool["function"], sort_keys=True) for tool in self._tools
            )
            content += FALLBACK_TOOL_PROMPT.format(schemas=schemas)
        return {"role": "system", "content": content}

    def update_from_env(
        self, observation: Any, reward: float, done: bool, info: dict[str, Any], **kwargs: Any
    ) -> None:
        text = str(observation)
        if not self._messages:  # the reset observation
            self._tools = list(info.get("tools") or [])
            self._messages = [self._system_message(), {"role": "user", "content": text}]
            return
        if self._trajectory.steps:
            step = self._trajectory.steps[-1]
            step.reward, step.done, step.info = float(reward), bool(done), dict(info)
        if done:
            return
        # Tool results become tool messages only when the template knows the tool role.
        results = tool_messages(text) if self.native_tools and info.get("tool_calls") else None
        self._messages.extend(results or [{"role": "user", "content": text}])

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        structured = kwargs.get("tool_calls") or []
        output = kwargs.get("model_output")
        if not structured and output is not None:
            structured = list(getattr(output, "tool_calls", []) or [])
        message: dict[str, Any] = {"role": "assistant", "content": response}
        action_text = response
        if structured:
            # The calls came back as structure, not text: keep them on the message (the
            # template renders them) and write them out for the env.
            message["tool_calls"] = structured
            action_text = tool_call_text(structured)
        self._messages.append(message)
        self._trajectory.steps.append(
            Step(
                observation=self._messages[-2]["content"] if len(self._messages) > 1 else None,
                model_response=response,
                action=action_text,
                chat_completions=self.chat_completions,
            )
        )
        return Action(action_text)
