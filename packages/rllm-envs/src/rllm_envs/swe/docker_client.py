"""The Docker engine connection the SWE env and its image builder share."""

from __future__ import annotations

from typing import Any

from rllm_envs.core.extras import require_extra
from rllm_envs.sandbox.docker_backend import connect


def docker_client(base_url: str | None = None) -> Any:
    """A connected docker SDK client, or a clear error saying what to install or start."""
    require_extra("swe", "docker")
    return connect(base_url)
