"""Stage ``sandbox-image``: the image rllm/Code-v0's ``docker`` backend runs code in.

Built from the Dockerfile shipped in the package (``rllm_envs/sandbox/Dockerfile``) on a base:
the official Python image where it is in the engine or can be pulled, else the Debian rootfs
(made first when missing). ``--sandbox-base`` picks one. The image records its base and its
recipe (the Dockerfile and the base image's id): a present image whose recipe still holds is
kept, one whose Dockerfile or base changed is rebuilt.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rllm_envs.sandbox.docker_images import build_image, image_labels
from rllm_envs.setup.base import SetupError, SetupRun, Stage, StageProgress
from rllm_envs.setup.rootfs import ensure_rootfs

PYTHON_BASE = "python:3.11-slim-bookworm"
RECIPE_LABEL = "rllm.sandbox.recipe"
BASE_LABEL = "rllm.sandbox.base"


def dockerfile_text() -> str:
    return resources.files("rllm_envs.sandbox").joinpath("Dockerfile").read_text("utf-8")


def recipe(dockerfile: str, base_id: str) -> str:
    return hashlib.sha256(f"{dockerfile}\n{base_id}".encode()).hexdigest()[:16]


def image_id(client: Any, tag: str) -> str | None:
    try:
        return client.images.get(tag).id
    except Exception:  # no such image
        return None


def present_state(client: Any, labels: Mapping[str, str], dockerfile: str) -> str | None:
    """What a present image is ("up to date", or kept unjudged), or None: rebuild it."""
    recorded = labels.get(RECIPE_LABEL)
    if recorded is None:
        return "present (no recorded recipe: kept; --force rebuilds it)"
    base_id = image_id(client, labels.get(BASE_LABEL, ""))
    if base_id is not None and recipe(dockerfile, base_id) == recorded:
        return "up to date"
    return None


def _python_base(run: SetupRun, progress: StageProgress) -> str | None:
    client = run.docker()
    if image_id(client, PYTHON_BASE) is not None:
        return PYTHON_BASE
    progress.note(f"pulling {PYTHON_BASE}")
    try:
        client.images.pull(PYTHON_BASE)
    except Exception:  # no registry reachable: the next base is tried
        return None
    return PYTHON_BASE


def _rootfs_base(run: SetupRun, progress: StageProgress) -> str:
    progress.note(f"{run.options.rootfs_image}: {ensure_rootfs(run, progress)}")
    return run.options.rootfs_image


# Where a base comes from, and the order `--sandbox-base` tries them in.
BASE_PROVIDERS: Mapping[str, Callable[[SetupRun, StageProgress], str | None]] = MappingProxyType(
    {"python": _python_base, "rootfs": _rootfs_base}
)
BASE_CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"auto": ("python", "rootfs"), "python": ("python",), "rootfs": ("rootfs",)}
)


def resolve_base(run: SetupRun, progress: StageProgress) -> str:
    for provider in BASE_CHOICES[run.options.sandbox_base]:
        base = BASE_PROVIDERS[provider](run, progress)
        if base is not None:
            return base
    raise SetupError(
        f"{PYTHON_BASE} cannot be pulled (no registry reachable): "
        "build the sandbox image on the Debian rootfs instead (--sandbox-base rootfs)"
    )


def ensure_sandbox_image(run: SetupRun, progress: StageProgress) -> str:
    client = run.docker()
    tag = run.options.sandbox_image
    dockerfile = dockerfile_text()
    labels = image_labels(client, tag)
    if labels is not None and not run.options.force:
        state = present_state(client, labels, dockerfile)
        if state is not None:
            return f"{tag} {state}"
    base = resolve_base(run, progress)
    base_id = image_id(client, base)
    if base_id is None:
        raise SetupError(f"the base image {base} vanished while setup ran: run this again")
    progress.note(f"docker build of {tag} on {base}")
    with tempfile.TemporaryDirectory(prefix="rllm-sandbox-image-") as folder:
        context = Path(folder)
        (context / "Dockerfile").write_text(dockerfile)
        build_image(
            client,
            context,
            tag,
            {BASE_LABEL: base, RECIPE_LABEL: recipe(dockerfile, base_id)},
            nocache=run.options.force,
            buildargs={"BASE": base},
        )
    return f"built {tag} on {base}"


STAGE = Stage("sandbox-image", "sandbox image (rllm/Code-v0, docker backend)", ensure_sandbox_image)
