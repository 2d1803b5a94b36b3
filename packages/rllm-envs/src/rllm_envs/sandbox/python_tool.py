"""A Python interpreter tool on the sandbox, for envs and agents that let a model run code.

Each call is a fresh sandboxed process (no state carries over between calls: a model that
wants state re-runs its setup), under the sandbox's policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rllm_envs.sandbox.backends import make_sandbox
from rllm_envs.sandbox.execution import ExecutionRequest, ExecutionResult, Sandbox
from rllm_envs.sandbox.policy import SandboxPolicy

TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "python",
        "description": (
            "Run a Python 3 program in an isolated sandbox (no network, no files kept between "
            "calls) and return what it printed. Use print() to see values."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python program to run."},
                "stdin": {"type": "string", "description": "Text given on standard input."},
            },
            "required": ["code"],
        },
    },
}


def format_result(result: ExecutionResult, limit: int = 4000) -> str:
    """What the model reads back: output, errors, and how the run ended when not cleanly."""
    parts = []
    if result.stdout:
        parts.append(result.stdout)
    if result.stderr:
        parts.append(f"[stderr]\n{result.stderr}")
    if result.status != "ok":
        parts.append(f"[{result.status}]")
    text = "\n".join(parts) or "[no output]"
    return text if len(text) <= limit else text[: limit - 30] + "\n[... output clipped]"


@dataclass
class PythonInterpreter:
    """`tool(code=..., stdin=...)` runs code in `sandbox` and returns the text for the model."""

    sandbox: Sandbox
    schema: dict[str, Any] = field(default_factory=lambda: TOOL_SCHEMA)

    @classmethod
    def on_backend(
        cls, backend: str = "bwrap", policy: SandboxPolicy | None = None, **options: Any
    ) -> PythonInterpreter:
        return cls(make_sandbox(backend, policy, **options))

    def run(self, code: str, stdin: str = "") -> ExecutionResult:
        request = ExecutionRequest(
            ("python3", "main.py"), files={"main.py": code.encode()}, stdin=stdin.encode()
        )
        return self.sandbox.run(request)

    def __call__(self, code: str, stdin: str = "") -> str:
        if not isinstance(code, str) or not code.strip():
            return "[error] the 'code' argument must be a non-empty string"
        return format_result(self.run(code, stdin if isinstance(stdin, str) else ""))

    def close(self) -> None:
        self.sandbox.close()
