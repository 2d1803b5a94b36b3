"""Agents for ``rllm/SWE-v0``: a tool-calling one and a bash-only one.

* :class:`SWEAgent` - the env's tools (bash, view, str_replace, create, search, submit) go into
  the model's own tool-calling chat template (:class:`ToolAgent`); calls come back as
  ``<tool_call>`` blocks or structured ``tool_calls``, results as ``role: "tool"`` messages.
* :class:`SWEBashAgent` - in the spirit of mini-swe-agent: no tool schemas at all, every reply
  is a thought and exactly one ```` ```bash ```` block; ``submit`` alone in a block ends the
  episode. Observations are plain user messages.

Both leave parsing to the env (its grammar takes either form), so they run under
:class:`~rllm_agents.execution.AgentExecutionEngine`, ``rllm-eval`` and ``rllm-train`` like any
other agent.
"""

from __future__ import annotations

from typing import Any

from rllm_agents.agents.text_agent import TextAgent
from rllm_agents.agents.tool_agent import ToolAgent

SWE_SYSTEM_PROMPT = (
    "You are a careful software engineer fixing a bug in a Python repository. Explore the code "
    "with the tools, reproduce the problem with a small script, change the library code (never "
    "the tests), check that your change works, then call submit. Call one or a few tools per "
    "reply and read their results before going on."
)

BASH_SYSTEM_PROMPT = """\
You are a careful software engineer fixing a bug in a Python repository. You work only \
through bash commands.

Every reply has two parts: a short thought, then exactly one ```bash block with one command \
(join steps with && if needed). Each command runs in a fresh shell in the repository root; \
directory changes and variables do not carry over, and there is no network. Edit files with \
sed, a here-document (cat <<'EOF' > file) or python. Reproduce the problem, fix the library \
code (never the tests), check the fix. When you are done, reply with a ```bash block that \
holds only:

submit"""

# Where the env's first observation starts listing tool schemas, which a bash-only agent does
# not use (its system prompt says how to act).
_TOOL_LISTING = "\nTools (JSON schemas):"


class SWEAgent(ToolAgent):
    """Tool calls through the chat template (see the module docstring)."""

    def __init__(
        self,
        system_prompt: str = SWE_SYSTEM_PROMPT,
        *,
        tokenizer: Any = None,
        native_tools: bool | None = None,
    ) -> None:
        super().__init__(system_prompt, tokenizer=tokenizer, native_tools=native_tools)

    def update_from_env(
        self, observation: Any, reward: float, done: bool, info: dict[str, Any], **kwargs: Any
    ) -> None:
        after_a_step = bool(self.trajectory.steps)
        super().update_from_env(observation, reward, done, info, **kwargs)
        if after_a_step:
            # The episode's reward is the trajectory's (ToolAgent records it per step only).
            self.trajectory.reward += float(reward)


class SWEBashAgent(TextAgent):
    """One bash command per reply, no tool schemas (see the module docstring)."""

    system_prompt = BASH_SYSTEM_PROMPT

    def format_observation(self, observation: Any, info: dict[str, Any]) -> str:
        text = super().format_observation(observation, info)
        if not self._messages and _TOOL_LISTING in text:
            text = text.split(_TOOL_LISTING, 1)[0].rstrip()
        return text

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return None
