"""rllm-agents: agents, chat templates, rollout engines and the async execution engines.

Heavy parts (torch, transformers, vllm) are imported only by the engines that need them.
"""

from rllm_agents.agents import (
    AGENTS,
    BaseAgent,
    FrozenLakeAgent,
    MathAgent,
    TextAgent,
    agent_for_env,
)
from rllm_agents.execution import AgentExecutionEngine, AgentWorkflowEngine, Workflow
from rllm_agents.metrics import compute_pass_at_k
from rllm_agents.types import Action, Episode, Step, TerminationReason, Trajectory

__all__ = [
    "AGENTS",
    "Action",
    "AgentExecutionEngine",
    "AgentWorkflowEngine",
    "BaseAgent",
    "Episode",
    "FrozenLakeAgent",
    "MathAgent",
    "Step",
    "TerminationReason",
    "TextAgent",
    "Trajectory",
    "Workflow",
    "agent_for_env",
    "compute_pass_at_k",
]
