"""PettingZoo's classic games as text; the contract card is :mod:`rllm_envs.multiagent.classic`."""

from rllm_envs.multiagent.classic import ClassicTextEnv as raw_env
from rllm_envs.multiagent.turn_env import make_versions

env, parallel_env = make_versions(raw_env)

__all__ = ["env", "parallel_env", "raw_env"]
