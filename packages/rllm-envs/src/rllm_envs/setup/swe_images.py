"""Stages ``swe-base`` and ``swe-projects``: rllm/SWE-v0's images, from the package's recipes.

:mod:`rllm_envs.swe.builder.images` does the work: pytest's wheels, git's Debian packages and
each project's sdist and wheels are downloaded on this machine into the cache
(``RLLM_SWE_CACHE``, default ``~/.cache/rllm/swe``), checked against their pinned sha256, and
installed offline in ``docker build`` on the Debian rootfs. Each image records its recipe; an
unchanged recipe is not built again, so a second run takes seconds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rllm_envs.setup.base import SetupError, SetupRun, Stage, StageProgress
from rllm_envs.swe.builder import images
from rllm_envs.swe.builder.projects import PROJECTS, Project, local_image, project_named


def selected_projects(names: tuple[str, ...]) -> tuple[Project, ...]:
    return tuple(project_named(name) for name in names) if names else PROJECTS


def _cache(run: SetupRun) -> Path:
    return run.options.swe_cache or images.cache_dir()


def _state(image: images.BuiltImage) -> str:
    return "built" if image.built else "up to date"


def build_base(run: SetupRun, progress: StageProgress) -> str:
    # git comes as Debian packages of the rootfs's release, fetched with this machine's apt.
    if shutil.which("apt-get") is None:
        raise SetupError(
            "the SWE base image takes git's Debian packages from this machine's apt, and "
            "apt-get is missing: run the setup on Debian 12 (bookworm)"
        )
    options = run.options
    progress.note("pytest's wheels and git's Debian packages (downloaded once, then cached)")
    base = images.build_base_image(
        run.docker(),
        _cache(run),
        tag=local_image(images.BASE_IMAGE, options.swe_image_prefix),
        rootfs=options.rootfs_image,
        nocache=options.force,
    )
    run.swe_base = base
    return f"{base.tag} {_state(base)}"


def build_projects(run: SetupRun, progress: StageProgress) -> str:
    if run.swe_base is None:
        raise RuntimeError("the swe-projects stage runs after swe-base")
    options = run.options
    projects = selected_projects(options.swe_projects)
    progress.items(len(projects))
    progress.note("the tools venv that reads sdists (made once, then cached)")
    tools = images.tools_python(_cache(run))
    built = 0
    for project in projects:
        progress.note(f"{project.repo} {project.version}")
        image = images.build_project_image(
            run.docker(),
            project,
            _cache(run),
            tools,
            base=run.swe_base,
            tag=local_image(project.image, options.swe_image_prefix),
            nocache=options.force,
        )
        built += image.built
        progress.advance(f"{image.tag} {_state(image)}")
    images_word = "image" if len(projects) == 1 else "images"
    return (
        f"{len(projects)} project {images_word} under {options.swe_image_prefix} "
        f"({built} built, {len(projects) - built} up to date)"
    )


BASE_STAGE = Stage("swe-base", "SWE base image (git, pytest)", build_base)
PROJECTS_STAGE = Stage("swe-projects", "SWE project images", build_projects)
