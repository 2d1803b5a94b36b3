"""Which stages make each env's parts, in the order they run.

``rllm-envs setup <target> ...`` runs the union of its targets' stages, each once, in the order
of :data:`STAGES` (an engine check before any image; the rootfs before what is built on it).
Envs missing here need nothing beyond their pip extra (``rllm-envs doctor`` checks those).
``serve`` (an image serving each env id named after it) is a target of its own: ``all`` leaves
it out, as it builds nothing without ids.
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
    serve_images,
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
    serve_images.STAGE,
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
# `serve ID [ID ...]`: the images of `rllm-envs serve ID` (on the rootfs where the official
# Python image is not in the engine; the stage makes the rootfs itself when it needs it).
SERVE_TARGET = "serve"
SERVE_STAGES: tuple[str, ...] = ("docker-engine", "serve-images")


def stages_for(targets: Iterable[str]) -> tuple[Stage, ...]:
    """The stages `targets` need, each once, in run order (``all``: every target's but
    ``serve``)."""
    wanted = set()
    for target in targets:
        if target == ALL_TARGETS:
            names = [name for stages in TARGET_STAGES.values() for name in stages]
        elif target == SERVE_TARGET:
            names = list(SERVE_STAGES)
        else:
            names = list(TARGET_STAGES[target])
        wanted.update(names)
    return tuple(stage for stage in STAGES if stage.name in wanted)
