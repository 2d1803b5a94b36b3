"""Project images: downloads on the host, offline installs in ``docker build``.

Containers here cannot reach the package index (and this machine's TLS interception would break
pip inside them anyway), so every byte an image needs is fetched on the host - sdists and wheels
with pip, git's Debian packages with apt - checked against its pinned sha256, and copied into
the build context. Two layers of images:

* ``rllm-swe/base:1``: the sandbox's debootstrap rootfs (python3 3.11) plus git, pytest (wheels
  unpacked into site-packages), a ``python`` and a ``pytest`` command, /scratch and /testbed.
* ``rllm-swe/<repo>:<version>``: the project's sdist tree at /testbed (owned by the sandbox
  user), a ``.pth`` putting it on sys.path, the project's extra wheels.

An image carries its recipe hash (``rllm.swe.recipe``): a changed recipe (Dockerfile, pinned
files, base) rebuilds it, an unchanged one is reused. ``rllm.swe.base`` is the content hash of
the /testbed tree, the ``base`` snapshot id task rows name.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_envs.sandbox.docker_images import BuildError, build_image, image_labels
from rllm_envs.sandbox.image_names import DEFAULT_ROOTFS_IMAGE, rootfs_image
from rllm_envs.sandbox.policy import SANDBOX_UID
from rllm_envs.setup.command import setup_command
from rllm_envs.swe.builder.projects import (
    GIT_DEBS,
    PYTEST_WHEELS,
    SDIST_BACKENDS,
    SHIPPED_IMAGE_PREFIX,
    Pinned,
    Project,
    local_image,
)

ROOTFS_IMAGE = DEFAULT_ROOTFS_IMAGE
# The base image's shipped name; this machine's is ``local_image(BASE_IMAGE)``.
BASE_IMAGE = f"{SHIPPED_IMAGE_PREFIX}base:1"
RECIPE_LABEL = "rllm.swe.recipe"
BASE_LABEL = "rllm.swe.base"
# Set on images whose /testbed already belongs to the sandbox user (no chown at reset).
OWNED_LABEL = "rllm.swe.testbed_owner"
PTH_NAME = "rllm_testbed.pth"

# Files of an sdist that are packaging by-products, not the project: they go.
_DROPPED_TREE_PARTS = ("__pycache__", ".pytest_cache")

_BASE_DOCKERFILE = """\
FROM {rootfs}
COPY debs /tmp/rllm-debs
COPY wheels /tmp/rllm-wheels
RUN dpkg -i /tmp/rllm-debs/*.deb >/dev/null \\
 && site="$(python3 -c 'import sys; print("/usr/local/lib/python%d.%d/dist-packages" % sys.version_info[:2])')" \\
 && mkdir -p "$site" \\
 && for wheel in /tmp/rllm-wheels/*.whl; do python3 -m zipfile -e "$wheel" "$site"; done \\
 && printf '#!/usr/bin/python3\\nimport sys\\nimport pytest\\nsys.exit(pytest.console_main())\\n' \\
    > /usr/local/bin/pytest && chmod 755 /usr/local/bin/pytest \\
 && ln -sf /usr/bin/python3 /usr/local/bin/python \\
 && rm -rf /tmp/rllm-debs /tmp/rllm-wheels /var/cache/apt/* /var/log/dpkg.log \\
 && mkdir -p /scratch /testbed && chmod 1777 /scratch && chown {uid}:{uid} /testbed
LABEL rllm.swe.image="base"
"""

_PROJECT_DOCKERFILE = """\
FROM {base}
COPY --chown={uid}:{uid} testbed /testbed
COPY wheels /tmp/rllm-wheels
COPY dist-info /tmp/rllm-dist-info
RUN site="$(python3 -c 'import sys; print("/usr/local/lib/python%d.%d/dist-packages" % sys.version_info[:2])')" \\
 && mv /tmp/rllm-dist-info "$site/{dist_info}" \\
 && for wheel in /tmp/rllm-wheels/*.whl; do [ -e "$wheel" ] && python3 -m zipfile -e "$wheel" "$site"; done; \\
    rm -rf /tmp/rllm-wheels \\
 && echo '{source_root}' > "$site/{pth}" \\
 && python3 -B -c "import {probe}"
LABEL rllm.swe.image="project" rllm.swe.project="{repo}" rllm.swe.version="{version}" \\
      {base_label}="{tree_hash}" {owned_label}="{uid}"
WORKDIR /testbed
"""


def cache_dir() -> Path:
    return Path(os.environ.get("RLLM_SWE_CACHE", "~/.cache/rllm/swe")).expanduser()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(argv: list[str], what: str, **kwargs: Any) -> str:
    completed = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip()[-2000:]
        raise BuildError(f"{what} failed ({' '.join(argv[:4])} ...): {tail}")
    return completed.stdout


# -- downloads (host side) -----------------------------------------------------------------
def tools_python(cache: Path) -> Path:
    """A private venv with the build backends pip needs to read sdist metadata."""
    venv = cache / "tools-venv"
    python = venv / "bin" / "python"
    stamp = venv / "rllm-backends.txt"
    wanted = "\n".join(SDIST_BACKENDS)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], "creating the tools venv")
    _run(
        [str(python), "-m", "pip", "install", "-q", "--upgrade", *SDIST_BACKENDS],
        "installing sdist build backends",
    )
    stamp.write_text(wanted)
    return python


def _checked(path: Path, pinned: Pinned) -> Path:
    actual = sha256_of(path)
    if actual != pinned.sha256:
        path.unlink()
        raise BuildError(
            f"{path.name}: sha256 {actual} does not match the pinned {pinned.sha256}; "
            "the file was removed - the index served different bytes for a pinned version"
        )
    return path


def _find_download(folder: Path, pinned: Pinned, suffix: str) -> Path | None:
    # Filenames spell a project "python-slugify", "python_slugify" or "Python_Slugify".
    wanted = _normalized(f"{pinned.name}-{pinned.version}-")
    for path in sorted(folder.glob(f"*{suffix}")):
        if _normalized(path.name).startswith(wanted) and sha256_of(path) == pinned.sha256:
            return path
    return None


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name.lower())


def download_sdist(pinned: Pinned, downloads: Path, tools: Path) -> Path:
    folder = downloads / "sdists"
    folder.mkdir(parents=True, exist_ok=True)
    found = _find_download(folder, pinned, ".tar.gz")
    if found is None:
        _run(
            [str(tools), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
            + ["--no-build-isolation", "-d", str(folder), pinned.requirement],
            f"downloading the sdist of {pinned.requirement}",
        )
        found = _find_download(folder, pinned, ".tar.gz")
        if found is None:
            candidates = [p for p in folder.glob("*.tar.gz") if pinned.version in p.name]
            if candidates:
                _checked(candidates[0], pinned)  # raises with the hash that came instead
            raise BuildError(f"pip did not save an sdist for {pinned.requirement}")
    return found


def download_wheel(pinned: Pinned, downloads: Path) -> Path:
    folder = downloads / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    found = _find_download(folder, pinned, ".whl")
    if found is None:
        _run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:"]
            + ["-d", str(folder), pinned.requirement],
            f"downloading the wheel of {pinned.requirement}",
        )
        found = _find_download(folder, pinned, ".whl")
        if found is None:
            raise BuildError(f"no wheel of {pinned.requirement} with the pinned sha256")
    return found


def download_debs(downloads: Path, packages: Iterable[str] = GIT_DEBS) -> list[Path]:
    """git's Debian packages from the host's apt sources (the distribution of the rootfs)."""
    folder = downloads / "debs"
    folder.mkdir(parents=True, exist_ok=True)
    packages = list(packages)
    have = {path.name.split("_", 1)[0]: path for path in folder.glob("*.deb")}
    missing = [name for name in packages if name not in have]
    if missing:
        argv = ["apt-get", "download", "-q", *missing]
        try:
            _run(argv, "apt-get download", cwd=folder)
        except BuildError:
            _run(["apt-get", "update", "-qq"], "apt-get update")
            _run(argv, "apt-get download", cwd=folder)
        have = {path.name.split("_", 1)[0]: path for path in folder.glob("*.deb")}
    return [have[name] for name in packages]


# -- the /testbed tree ---------------------------------------------------------------------
def unpack_sdist(sdist: Path, target: Path) -> Path:
    """The sdist's tree (its top folder stripped) at `target`, without packaging by-products."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as archive:
        members = archive.getmembers()
        top = members[0].name.split("/", 1)[0]
        for member in members:
            if not (member.isfile() or member.isdir()):
                continue  # no links or devices from an archive
            relative = member.name.split("/", 1)[1] if "/" in member.name else ""
            parts = relative.split("/")
            if not relative or member.name.split("/", 1)[0] != top:
                continue
            if any(part.endswith(".egg-info") or part in _DROPPED_TREE_PARTS for part in parts):
                continue
            if relative == "PKG-INFO" or ".." in parts:
                continue
            destination = target / relative
            if member.isdir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None
            destination.write_bytes(source.read())
            destination.chmod(0o755 if member.mode & 0o111 else 0o644)
    return target


def sdist_metadata(sdist: Path) -> bytes:
    """The sdist's PKG-INFO (core metadata, the format of a dist-info's METADATA)."""
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if (
                member.isfile()
                and member.name.count("/") == 1
                and member.name.endswith("/PKG-INFO")
            ):
                source = archive.extractfile(member)
                assert source is not None
                return source.read()
    raise BuildError(f"{sdist.name} has no PKG-INFO")


def tree_hash(root: Path) -> str:
    """Content hash of a tree (paths and bytes): the snapshot id rows call ``base``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


# -- docker builds -------------------------------------------------------------------------
@dataclass(frozen=True)
class BuiltImage:
    tag: str
    recipe: str
    built: bool  # False: an image with this recipe was already there
    base: str = ""  # the tree hash (project images)


def recipe_hash(dockerfile: str, files: Iterable[Path], *parts: str) -> str:
    digest = hashlib.sha256(dockerfile.encode())
    for path in sorted(files, key=lambda p: p.name):
        digest.update(f"{path.name}:{sha256_of(path)}".encode())
    for part in parts:
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def _image_recipe(client: Any, tag: str) -> str | None:
    return (image_labels(client, tag) or {}).get(RECIPE_LABEL)


def _docker_build(client: Any, context: Path, tag: str, recipe: str, nocache: bool) -> None:
    build_image(client, context, tag, {RECIPE_LABEL: recipe}, nocache=nocache)


def _copy_all(paths: Iterable[Path], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for path in paths:
        shutil.copy2(path, folder / path.name)


def build_base_image(
    client: Any,
    downloads: Path,
    *,
    tag: str | None = None,
    rootfs: str | None = None,
    nocache: bool = False,
) -> BuiltImage:
    tag = tag or local_image(BASE_IMAGE)
    rootfs = rootfs or rootfs_image()
    try:
        client.images.get(rootfs)
    except Exception as error:
        raise BuildError(
            f"the rootfs image {rootfs!r} is missing: {setup_command('swe')} builds it"
        ) from error
    debs = download_debs(downloads)
    wheels = [download_wheel(pinned, downloads) for pinned in PYTEST_WHEELS]
    dockerfile = _BASE_DOCKERFILE.format(rootfs=rootfs, uid=SANDBOX_UID)
    recipe = recipe_hash(dockerfile, [*debs, *wheels])
    if not nocache and _image_recipe(client, tag) == recipe:
        return BuiltImage(tag, recipe, built=False)
    with tempfile.TemporaryDirectory(prefix="rllm-swe-base-") as folder:
        context = Path(folder)
        _copy_all(debs, context / "debs")
        _copy_all(wheels, context / "wheels")
        (context / "Dockerfile").write_text(dockerfile)
        _docker_build(client, context, tag, recipe, nocache)
    return BuiltImage(tag, recipe, built=True)


def _probe_module(project: Project) -> str:
    package = project.packages[0].removeprefix(f"{project.import_root}/")
    return package.removesuffix("/__init__.py").removesuffix(".py").replace("/", ".")


def build_project_image(
    client: Any,
    project: Project,
    downloads: Path,
    tools: Path,
    *,
    base: BuiltImage,
    tag: str | None = None,
    nocache: bool = False,
) -> BuiltImage:
    sdist = download_sdist(project.sdist, downloads, tools)
    wheels = [download_wheel(pinned, downloads) for pinned in project.wheels]
    tag = tag or local_image(project.image)
    with tempfile.TemporaryDirectory(prefix=f"rllm-swe-{project.repo}-") as folder:
        context = Path(folder)
        tree = unpack_sdist(sdist, context / "testbed")
        # The project's metadata without its files: tests that ask importlib.metadata for the
        # version find it, and no copy of the clean tree sits in site-packages.
        (context / "dist-info").mkdir()
        (context / "dist-info" / "METADATA").write_bytes(sdist_metadata(sdist))
        (context / "dist-info" / "RECORD").write_text("")
        snapshot = tree_hash(tree)
        dockerfile = _PROJECT_DOCKERFILE.format(
            base=base.tag,
            uid=SANDBOX_UID,
            source_root=project.source_root,
            pth=PTH_NAME,
            probe=_probe_module(project),
            repo=project.repo,
            version=project.version,
            base_label=BASE_LABEL,
            owned_label=OWNED_LABEL,
            dist_info=f"{_normalized(project.name)}-{project.version}.dist-info",
            tree_hash=snapshot,
        )
        recipe = recipe_hash(dockerfile, [sdist, *wheels], base.recipe)
        if not nocache and _image_recipe(client, tag) == recipe:
            return BuiltImage(tag, recipe, built=False, base=snapshot)
        _copy_all(wheels, context / "wheels")
        (context / "Dockerfile").write_text(dockerfile)
        _docker_build(client, context, tag, recipe, nocache)
    return BuiltImage(tag, recipe, built=True, base=snapshot)


def snapshot_of(project: Project, downloads: Path, tools: Path) -> str:
    """The ``base`` snapshot id of a project's tree, without building anything."""
    sdist = download_sdist(project.sdist, downloads, tools)
    with tempfile.TemporaryDirectory(prefix="rllm-swe-tree-") as folder:
        return tree_hash(unpack_sdist(sdist, Path(folder)))
