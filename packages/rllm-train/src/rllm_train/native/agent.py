"""The agent used for an env: ``env.agent`` ("module:Class") if set, else rllm-agents' choice."""

from __future__ import annotations

from rllm_agents.agents.base import BaseAgent
from rllm_agents.agents.registry import agent_for_env
from rllm_envs.core.loading import load_attr

from rllm_train import default_task

# Agent arguments the trainer uses by default for an env id (the user's agent_args win).
DEFAULT_AGENT_ARGS: dict[str, dict[str, object]] = {
    env_id: default_task.AGENT_ARGS
    for env_id in (default_task.ENV_ID, default_task.DEPRECATED_ENV_ID)
}


def default_agent_args(env_id: str) -> dict[str, object]:
    return dict(DEFAULT_AGENT_ARGS.get(env_id.rpartition(":")[2], {}))


def agent_class_for(env_id: str, agent_path: str = "") -> type[BaseAgent]:
    """`agent_path` if given, else the agent registered for `env_id` (the generic TextAgent)."""
    if not agent_path:
        return agent_for_env(env_id.rpartition(":")[2])
    agent_class = load_attr(agent_path, what="env.agent")  # a LoadError is a ValueError
    if not (isinstance(agent_class, type) and issubclass(agent_class, BaseAgent)):
        raise ValueError(f"env.agent={agent_path!r} is not a BaseAgent subclass")
    return agent_class
