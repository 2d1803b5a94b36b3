"""The table of sandbox backends, chosen by name: ``make_sandbox("bwrap")``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rllm_envs.core.loading import load_attr
from rllm_envs.sandbox.execution import Sandbox
from rllm_envs.sandbox.policy import SandboxPolicy

# Entry points are strings so naming a backend imports only that backend's dependencies.
SANDBOX_BACKENDS: Mapping[str, str] = {
    "bwrap": "rllm_envs.sandbox.bwrap:BwrapSandbox",
    "docker": "rllm_envs.sandbox.docker_backend:DockerSandbox",
}


def make_sandbox(name: str, policy: SandboxPolicy | None = None, **options: Any) -> Sandbox:
    """A sandbox of backend `name` enforcing `policy` (default: `SandboxPolicy()`).

    `options` go to the backend (docker: `image`, `pool_size`, `base_url`). A backend whose
    engine is missing raises :class:`~rllm_envs.sandbox.bwrap.MissingEngineError` saying
    what to install.
    """
    if name not in SANDBOX_BACKENDS:
        raise ValueError(
            f"unknown sandbox backend {name!r}; choose from {sorted(SANDBOX_BACKENDS)}"
        )
    backend = load_attr(SANDBOX_BACKENDS[name], what="sandbox backend")
    return backend(policy=policy or SandboxPolicy(), **options)
