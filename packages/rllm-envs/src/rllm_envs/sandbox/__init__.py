"""Sandboxes for untrusted code: one :class:`SandboxPolicy`, several backends.

Usage::

    from rllm_envs.sandbox import ExecutionRequest, make_sandbox
    sandbox = make_sandbox("bwrap")            # or "docker"
    result = sandbox.run(ExecutionRequest(("python3", "-c", "print(6 * 7)")))
    result.stdout                              # '42\\n'
    sandbox.close()

Backends (``SANDBOX_BACKENDS``): ``bwrap`` (bubblewrap namespaces, rlimits and seccomp; about ten
milliseconds a run) and ``docker`` (containers of a real Docker engine with a warm pool). Both
enforce the same policy; see docs/envs/code.md.
:class:`PythonInterpreter` is a tool (with its JSON schema) on any of them.
"""

from rllm_envs.sandbox.backends import SANDBOX_BACKENDS, make_sandbox
from rllm_envs.sandbox.bwrap import MissingEngineError
from rllm_envs.sandbox.execution import ExecutionRequest, ExecutionResult, Sandbox
from rllm_envs.sandbox.policy import SandboxPolicy
from rllm_envs.sandbox.python_tool import PythonInterpreter

__all__ = [
    "SANDBOX_BACKENDS",
    "ExecutionRequest",
    "ExecutionResult",
    "MissingEngineError",
    "PythonInterpreter",
    "Sandbox",
    "SandboxPolicy",
    "make_sandbox",
]
