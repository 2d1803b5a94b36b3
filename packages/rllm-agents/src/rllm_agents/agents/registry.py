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


# The one "module:attribute" loader, by the name this module has always given it.
load_entry_point = load_attr


def agent_for_env(env_id: str) -> type[BaseAgent]:
    """The agent class registered for `env_id`, else the generic :class:`TextAgent`."""
    bare_id = env_id.split(":", 1)[-1]  # "rllm_envs:rllm/X-v0" names the same env
    entry_point = AGENTS.get(bare_id)
    return load_attr(entry_point, what="agent") if entry_point else TextAgent
