"""The referential game, PettingZoo style; the contract card is :mod:`rllm_envs.multiagent.referential`."""

from rllm_envs.multiagent.phase_env import make_versions
from rllm_envs.multiagent.referential import ReferentialEnv as raw_env

env, parallel_env = make_versions(raw_env)

__all__ = ["env", "parallel_env", "raw_env"]
