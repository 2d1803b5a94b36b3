"""The task ``rllm-train`` trains on when run with no arguments, and how its agent is set up.

The env itself is ``rllm/Arithmetic-v0`` in rllm-envs (:mod:`rllm_envs.arithmetic`, whose
docstring is its contract card). It used to live here as ``rllm_train/Arithmetic-v0``; that
id, and the ``"rllm_train.default_task:rllm_train/Arithmetic-v0"`` form older configs use,
still make it for one version, with a ``DeprecationWarning`` naming the new id.
"""

from __future__ import annotations

from rllm_envs import register_envs
from rllm_envs.arithmetic import DEPRECATED_ENV_ID, ENV_ID
from rllm_envs.arithmetic import DeprecatedArithmeticEnv as ArithmeticEnv  # the old class path

# What the trainer gives the env's agent by default: a short system prompt keeps the prompt
# (most of the compute of a 10-token answer) small and asks for a bare number.
AGENT_ARGS = {"system_prompt": "You are a calculator."}

__all__ = ["AGENT_ARGS", "DEPRECATED_ENV_ID", "ENV_ID", "ArithmeticEnv"]

# Importing this module registered the old id before; it still does (with every rllm id), so
# the "rllm_train.default_task:rllm_train/Arithmetic-v0" form works even without the
# start-up hook (RLLM_ENVS_NO_AUTOREGISTER=1).
register_envs()
