"""Shared by the rllm/SWE-v0 tests: what they need (Docker, project images) and task samples."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rllm_envs.swe.tasks import load_swe_tasks

from tests.parts import require_part

FAST_POLICY = {
    "cpu_seconds": 20,
    "wall_seconds": 20,
    "memory_mb": 1024,
    "max_processes": 64,
    "max_output_bytes": 256 * 1024,
}


def docker_client() -> Any:
    try:
        import docker

        client = docker.from_env()
        client.ping()
        return client
    except Exception as error:  # no SDK or no engine
        require_part(False, f"a running Docker engine is needed for rllm/SWE-v0 ({error})")


def require_images(images: Iterable[str]) -> Any:
    """The docker client, once every image is there (built by `rllm-envs setup swe`)."""
    client = docker_client()
    for image in images:
        try:
            client.images.get(image)
        except Exception:
            require_part(False, f"image {image} missing: rllm-envs setup swe")
    return client


def shipped_rows(split: str) -> list[dict[str, Any]]:
    return [dict(row) for row in load_swe_tasks(None, split).rows]


def sample_rows(split: str, per_project: int) -> list[dict[str, Any]]:
    """The first `per_project` rows of every project of a split (rows are sorted by id)."""
    taken: dict[str, int] = {}
    sample = []
    for row in shipped_rows(split):
        if taken.get(row["repo"], 0) < per_project:
            taken[row["repo"]] = taken.get(row["repo"], 0) + 1
            sample.append(row)
    return sample


def swe_containers(client: Any) -> list[Any]:
    # Other processes' containers come and go while the listing inspects each one.
    return client.containers.list(all=True, filters={"label": "rllm.swe=1"}, ignore_removed=True)
