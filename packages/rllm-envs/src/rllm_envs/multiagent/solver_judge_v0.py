"""Solver-judge on math tasks, PettingZoo style; the card is :mod:`rllm_envs.multiagent.solver_judge`."""

from rllm_envs.multiagent.phase_env import make_versions
from rllm_envs.multiagent.solver_judge import SolverJudgeEnv as raw_env

env, parallel_env = make_versions(raw_env)

__all__ = ["env", "parallel_env", "raw_env"]
