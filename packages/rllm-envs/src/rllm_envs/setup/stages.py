"""Which stages make each env's parts, in the order they run.

``rllm-envs setup <target> ...`` runs the union of its targets' stages, each once, in the order
of :data:`STAGES` (an engine check before any image; the rootfs before what is built on it).
Envs missing here need nothing beyond their pip extra (``rllm-envs doctor`` checks those).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from rllm_envs.setup import (
    browser,
    bubblewrap,
    engine,
    harbor_images,
    rootfs,
    sandbox_image,
    swe_images,
)
from rllm_envs.setup.base import Stage

STAGES: tuple[Stage, ...] = (
    engine.STAGE,
    rootfs.STAGE,
    sandbox_image.STAGE,
    bubblewrap.STAGE,
    swe_images.BASE_STAGE,
    swe_images.PROJECTS_STAGE,
    harbor_images.STAGE,
    browser.STAGE,
)
STAGES_BY_NAME: Mapping[str, Stage] = MappingProxyType({stage.name: stage for stage in STAGES})

TARGET_STAGES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # rllm/Code-v0: the docker backend's image (its base made here when needed), and a
        # check of the default bwrap backend.
        "code": ("docker-engine", "sandbox-image", "bubblewrap"),
        "swe": ("docker-engine", "rootfs", "swe-base", "swe-projects"),
        "web": ("browser",),
        # rllm/Harbor-v0: the shipped tasks' images, on debian:bookworm-slim (the rootfs
        # stands for it where no registry is reachable).
        "harbor": ("docker-engine", "rootfs", "harbor-images"),
    }
)
ALL_TARGETS = "all"
TARGETS: tuple[str, ...] = (*TARGET_STAGES, ALL_TARGETS)


def stages_for(targets: Iterable[str]) -> tuple[Stage, ...]:
    """The stages `targets` need, each once, in run order (``all``: every target's)."""
    wanted = set()
    for target in targets:
        names = (
            [name for stages in TARGET_STAGES.values() for name in stages]
            if target == ALL_TARGETS
            else TARGET_STAGES[target]
        )
        wanted.update(names)
    return tuple(stage for stage in STAGES if stage.name in wanted)
