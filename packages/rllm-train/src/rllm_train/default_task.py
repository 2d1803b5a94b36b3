"""The task ``rllm-train`` trains on when run with no arguments, and how its agent is set up.

The default is ``rllm/RunningTotal-v0`` (:mod:`rllm_envs.running_total`, whose docstring is its
contract card): a running total kept over three turns, where each turn must read the env's last
message. The first default, single-digit addition in one turn (``rllm/Arithmetic-v0``), stays
available by name: ``rllm-train --config arithmetic``.

``rllm/Arithmetic-v0`` used to live here as ``rllm_train/Arithmetic-v0``; that id, and the
``"rllm_train.default_task:rllm_train/Arithmetic-v0"`` form older configs use, still make it for
one version, with a ``DeprecationWarning`` naming the new id.
"""

from __future__ import annotations

from rllm_envs import register_envs
from rllm_envs.arithmetic import DEPRECATED_ENV_ID
from rllm_envs.arithmetic import ENV_ID as ARITHMETIC_ENV_ID
from rllm_envs.arithmetic import DeprecatedArithmeticEnv as ArithmeticEnv  # the old class path
from rllm_envs.running_total import ENV_ID

# What the trainer gives these envs' agent by default: a short system prompt keeps the prompt
# (most of the compute of a 10-token answer) small and asks for bare numbers.
AGENT_ARGS = {"system_prompt": "You are a calculator."}
AGENT_ARGS_BY_ENV = {
    env_id: AGENT_ARGS for env_id in (ENV_ID, ARITHMETIC_ENV_ID, DEPRECATED_ENV_ID)
}

__all__ = [
    "AGENT_ARGS",
    "AGENT_ARGS_BY_ENV",
    "ARITHMETIC_ENV_ID",
    "DEPRECATED_ENV_ID",
    "ENV_ID",
    "ArithmeticEnv",
]

# Importing this module registered the old id before; it still does (with every rllm id), so
# the "rllm_train.default_task:rllm_train/Arithmetic-v0" form works even without the
# start-up hook (RLLM_ENVS_NO_AUTOREGISTER=1).
register_envs()
