"""Kuhn poker as text, PettingZoo style; the contract card is :mod:`rllm_envs.multiagent.kuhn_poker`."""

from rllm_envs.multiagent.kuhn_poker import KuhnPokerEnv as raw_env
from rllm_envs.multiagent.turn_env import make_versions

env, parallel_env = make_versions(raw_env)

__all__ = ["env", "parallel_env", "raw_env"]
