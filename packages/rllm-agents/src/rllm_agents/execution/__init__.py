"""The async execution engines: single-agent rollouts, multi-step and multi-agent workflows."""

from rllm_agents.execution.engine import AgentExecutionEngine
from rllm_agents.execution.env_spec import EnvSpec
from rllm_agents.execution.multiagent import (
    MultiAgentWorkflow,
    game_tasks,
    multiagent_engine,
    role_groups,
)
from rllm_agents.execution.policies import ModelPolicy, ScriptedPolicy
from rllm_agents.execution.ray_executor import RayExecutor
from rllm_agents.execution.seat_metrics import summarize_seats, wilson_interval
from rllm_agents.execution.turns import env_ending, episodes_to_jsonl
from rllm_agents.execution.workflow import AgentWorkflowEngine, SingleTurnWorkflow, Workflow

__all__ = [
    "AgentExecutionEngine",
    "AgentWorkflowEngine",
    "EnvSpec",
    "ModelPolicy",
    "MultiAgentWorkflow",
    "RayExecutor",
    "ScriptedPolicy",
    "SingleTurnWorkflow",
    "Workflow",
    "env_ending",
    "episodes_to_jsonl",
    "game_tasks",
    "multiagent_engine",
    "role_groups",
    "summarize_seats",
    "wilson_interval",
]
