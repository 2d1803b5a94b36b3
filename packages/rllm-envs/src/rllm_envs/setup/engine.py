"""Stage ``docker-engine``: a Docker engine answers (the one part setup cannot start itself)."""

from __future__ import annotations

import os

from rllm_envs.setup.base import SetupRun, Stage, StageProgress


def check_engine(run: SetupRun, progress: StageProgress) -> str:
    version = run.docker().version().get("Version", "unknown version")
    return f"Docker {version} at {os.environ.get('DOCKER_HOST') or 'the local socket'}"


STAGE = Stage("docker-engine", "Docker engine", check_engine)
