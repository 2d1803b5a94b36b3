"""The Docker engine connection the SWE env and its image builder share."""

from __future__ import annotations

from typing import Any

from rllm_envs.sandbox.docker_backend import connect


def docker_client(base_url: str | None = None) -> Any:
    """A connected docker SDK client, or a clear error saying what to install or start."""
    return connect(base_url, extra="swe")
