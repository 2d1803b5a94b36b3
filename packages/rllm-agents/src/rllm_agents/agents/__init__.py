"""Agents: the interface, built-in agents per env, and the env-id → agent registry."""

from rllm_agents.agents.base import BaseAgent
from rllm_agents.agents.frozenlake_agent import FrozenLakeAgent
from rllm_agents.agents.math_agent import MathAgent
from rllm_agents.agents.registry import AGENTS, agent_for_env
from rllm_agents.agents.text_agent import TextAgent, drop_thinking
from rllm_agents.agents.web_agent import WebAgent

__all__ = [
    "AGENTS",
    "BaseAgent",
    "FrozenLakeAgent",
    "MathAgent",
    "TextAgent",
    "WebAgent",
    "agent_for_env",
    "drop_thinking",
]
