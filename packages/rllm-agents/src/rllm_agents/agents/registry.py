"""Which agent plays which env: ``AGENTS`` maps env ids to agent classes."""

from __future__ import annotations

from rllm_envs.core.loading import load_attr

from rllm_agents.agents.base import BaseAgent
from rllm_agents.agents.text_agent import TextAgent

# String entry points, so agents with heavy imports load only when used.
AGENTS: dict[str, str] = {
    "rllm/FrozenLake-v0": "rllm_agents.agents.frozenlake_agent:FrozenLakeAgent",
    "rllm/Math-v0": "rllm_agents.agents.math_agent:MathAgent",
    "rllm/GymText-v0": "rllm_agents.agents.text_agent:TextAgent",
    "rllm/MCP-v0": "rllm_agents.agents.tool_agent:ToolAgent",
    "rllm/Web-v0": "rllm_agents.agents.web_agent:WebAgent",
    "rllm/SWE-v0": "rllm_agents.agents.swe_agent:SWEAgent",
}


# Arguments the registered agent gets for an env unless the caller gives its own: rllm-eval and
# rllm-train both start from these, so an env is played the same way by either command. A short
# calculator prompt keeps the arithmetic tasks' prompts (most of a 12-token turn's compute) small
# and asks for bare numbers.
CALCULATOR = {"system_prompt": "You are a calculator."}
AGENT_ARGS: dict[str, dict[str, object]] = {
    "rllm/RunningTotal-v0": CALCULATOR,
    "rllm/Arithmetic-v0": CALCULATOR,
    "rllm_train/Arithmetic-v0": CALCULATOR,  # the deprecated id, for one more version
}


def agent_args_for_env(env_id: str) -> dict[str, object]:
    """A fresh copy of the default agent arguments for `env_id` (empty for most envs)."""
    return dict(AGENT_ARGS.get(env_id.rpartition(":")[2], {}))


# The one "module:attribute" loader, by the name this module has always given it.
load_entry_point = load_attr


def agent_for_env(env_id: str) -> type[BaseAgent]:
    """The agent class registered for `env_id`, else the generic :class:`TextAgent`."""
    bare_id = env_id.split(":", 1)[-1]  # "rllm_envs:rllm/X-v0" names the same env
    entry_point = AGENTS.get(bare_id)
    return load_attr(entry_point, what="agent") if entry_point else TextAgent
