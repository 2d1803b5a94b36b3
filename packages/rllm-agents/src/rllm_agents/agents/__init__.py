"""Agents: the interface, built-in agents per env, the env-id → agent registry, and the
scripted players of multi-agent envs."""

from rllm_agents.agents.base import BaseAgent
from rllm_agents.agents.frozenlake_agent import FrozenLakeAgent
from rllm_agents.agents.math_agent import MathAgent
from rllm_agents.agents.opponents import OPPONENTS, scripted_move
from rllm_agents.agents.registry import AGENTS, agent_for_env
from rllm_agents.agents.swe_agent import SWEAgent, SWEBashAgent
from rllm_agents.agents.text_agent import TextAgent, drop_thinking
from rllm_agents.agents.web_agent import WebAgent

__all__ = [
    "AGENTS",
    "BaseAgent",
    "FrozenLakeAgent",
    "MathAgent",
    "OPPONENTS",
    "SWEAgent",
    "SWEBashAgent",
    "TextAgent",
    "WebAgent",
    "agent_for_env",
    "drop_thinking",
    "scripted_move",
]
