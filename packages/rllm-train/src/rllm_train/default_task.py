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

from rllm_agents.agents.registry import CALCULATOR
from rllm_envs import register_envs
from rllm_envs.arithmetic import DEPRECATED_ENV_ID
from rllm_envs.arithmetic import ENV_ID as ARITHMETIC_ENV_ID
from rllm_envs.arithmetic import DeprecatedArithmeticEnv as ArithmeticEnv  # the old class path
from rllm_envs.running_total import ENV_ID

# What these envs' agent gets by default, in rllm-train as in rllm-eval (rllm_agents' registry).
AGENT_ARGS = dict(CALCULATOR)

__all__ = [
    "AGENT_ARGS",
    "ARITHMETIC_ENV_ID",
    "DEPRECATED_ENV_ID",
    "ENV_ID",
    "ArithmeticEnv",
]

# Importing this module registered the old id before; it still does (with every rllm id), so
# the "rllm_train.default_task:rllm_train/Arithmetic-v0" form works even without the
# start-up hook (RLLM_ENVS_NO_AUTOREGISTER=1).
register_envs()
