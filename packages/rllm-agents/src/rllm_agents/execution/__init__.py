"""The async execution engines: single-agent rollouts and multi-step workflows."""

from rllm_agents.execution.engine import AgentExecutionEngine, env_ending, episodes_to_jsonl
from rllm_agents.execution.workflow import AgentWorkflowEngine, SingleTurnWorkflow, Workflow

__all__ = [
    "AgentExecutionEngine",
    "AgentWorkflowEngine",
    "SingleTurnWorkflow",
    "Workflow",
    "env_ending",
    "episodes_to_jsonl",
]
