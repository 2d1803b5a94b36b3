"""Stage ``harbor-images``: the images of the Harbor tasks rllm-envs ships (rllm/Harbor-v0).

Each task's ``environment/`` is built as ``rllm-harbor/<task>:<digest>``, the name the env looks
for, so its first episode starts at once; an unchanged folder is not built again. The tasks
start ``FROM debian:bookworm-slim``. Where that image is neither in the engine nor pullable (no
registry reachable), the Debian bookworm rootfs this setup makes with debootstrap (minbase: the
same release and package set, plus python3-minimal) is tagged under that name.
"""

from __future__ import annotations

import re
from pathlib import Path

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.harbor.containers import build_folder
from rllm_envs.harbor.task_folder import find_tasks, load_task, shipped_tasks_dir
from rllm_envs.setup.base import SetupRun, Stage, StageFailed, StageProgress

# The base image the shipped tasks name, and what stands for it without a registry.
DEBIAN_BASE = "debian:bookworm-slim"
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", re.IGNORECASE | re.MULTILINE)


def bases_of(dockerfile: Path) -> set[str]:
    return set(_FROM.findall(dockerfile.read_text("utf-8")))


def ensure_debian_base(run: SetupRun, progress: StageProgress) -> str:
    client = run.docker()
    try:
        client.images.get(DEBIAN_BASE)
        return "present"
    except Exception:
        pass
    try:
        client.images.pull(DEBIAN_BASE)
        return "pulled"
    except Exception:
        progress.note(f"{DEBIAN_BASE} cannot be pulled: the Debian rootfs stands for it")
    # The rootfs stage ran before this one (TARGET_STAGES["harbor"]).
    repository, _, tag = DEBIAN_BASE.partition(":")
    client.images.get(run.options.rootfs_image).tag(repository, tag)
    return f"tagged from {run.options.rootfs_image}"


def build_shipped(run: SetupRun, progress: StageProgress) -> str:
    tasks = [load_task(path) for path in find_tasks(shipped_tasks_dir())]
    bases = set().union(*(bases_of(task.environment_dir / "Dockerfile") for task in tasks))
    unexpected = bases - {DEBIAN_BASE}
    if unexpected:
        raise StageFailed(
            f"shipped Harbor tasks start from {sorted(unexpected)}: only {DEBIAN_BASE} is provided"
        )
    base = ensure_debian_base(run, progress)
    progress.items(len(tasks))
    client = run.docker()
    for task in tasks:
        try:
            tag = build_folder(client, task, task.environment_dir, nocache=run.options.force)
        except InfrastructureFailure as error:
            raise StageFailed(str(error)) from error
        progress.advance(tag)
    return f"{len(tasks)} task images under rllm-harbor/ ({DEBIAN_BASE} {base})"


STAGE = Stage("harbor-images", "Harbor task images (the shipped tasks)", build_shipped)
