"""The Python packages a serve image holds, fetched and laid out on this machine.

Containers reach no package index here (and the image has no pip), so every wheel is fetched on
the host and the image only copies folders laid out as site-packages:

* rllm-envs itself: a wheel built from a copy of its source tree (``pip wheel --no-deps``)
  where it runs from one (a checkout, an editable install), else one zipped from its installed
  files.
* its dependencies with the env's extras: resolved by pip for the image's Python and platform
  (``pip install --dry-run --report``, binary wheels only), downloaded once into the cache
  (``RLLM_SERVE_CACHE``, default ``~/.cache/rllm/serve``) and checked against the index's
  sha256 when reused.
* each wheel unpacked as pip would install it: ``*.data/purelib`` and ``platlib`` merged into
  the top, scripts, headers and data files left out (the server needs none of them).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from rllm_envs.sandbox.docker_images import BuildError
from rllm_envs.setup.base import SetupError

DISTRIBUTION = "rllm-envs"
# Folders of a source tree that are build or run by-products, not the package.
_NOT_SOURCE = ("__pycache__", ".egg-info", ".pytest_cache")
_NOT_SOURCE_ROOTS = ("build", "dist")
# A wheel's ``*.data`` subfolders that belong in site-packages.
_LIBRARY_DATA = ("purelib", "platlib")
_PIP_TAIL = 2000


@dataclass(frozen=True)
class ImagePython:
    """The Python of an image's base, as the wheels must fit it."""

    version: str  # "3.11"
    machine: str  # "x86_64", "aarch64"
    glibc: tuple[int, int] | None  # None: another C library (no manylinux wheel runs)
    site: str  # the site-packages folder the wheels go into

    def pip_options(self) -> list[str]:
        """pip's options that select wheels for this Python (with ``--only-binary=:all:``)."""
        if self.glibc is None:
            raise BuildError("the base image's C library is not glibc: manylinux wheels need it")
        major, minor = self.glibc
        tags = [f"manylinux_{major}_{m}_{self.machine}" for m in range(minor, 4, -1)]
        # The legacy names of manylinux_2_17, _2_12 and _2_5, which older wheels carry alone.
        tags += [f"{name}_{self.machine}" for name in ("manylinux2014", "manylinux2010")]
        tags += [f"manylinux1_{self.machine}"]
        abi = "cp" + self.version.replace(".", "")
        options = ["--python-version", self.version, "--implementation", "cp", "--abi", abi]
        for tag in tags:
            options += ["--platform", tag]
        return options


@dataclass(frozen=True)
class Pinned:
    """One wheel the resolver chose: the file and the sha256 the index gave for it."""

    name: str
    version: str
    filename: str
    sha256: str | None


def cache_dir() -> Path:
    return Path(os.environ.get("RLLM_SERVE_CACHE", "~/.cache/rllm/serve")).expanduser()


def require_pip() -> None:
    if importlib.util.find_spec("pip") is None:
        raise SetupError(
            f"a serve image's wheels are fetched with pip, which {sys.executable} lacks: "
            f"{sys.executable} -m ensurepip"
        )


def _run(argv: list[str], what: str) -> str:
    completed = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip()[-_PIP_TAIL:]
        raise BuildError(f"{what} failed: {tail}")
    return completed.stdout


# -- rllm-envs itself ------------------------------------------------------------------------
def source_tree() -> Path | None:
    """The folder of rllm-envs' pyproject.toml where the package runs from its source tree."""
    import rllm_envs

    root = Path(rllm_envs.__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and f'name = "{DISTRIBUTION}"' in pyproject.read_text("utf-8"):
        return root
    return None


def _source_files(root: Path) -> list[Path]:
    """The files of the source tree a wheel is built from (not what builds and runs left)."""
    files = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).parts
        if relative[0] in _NOT_SOURCE_ROOTS or any(p.endswith(_NOT_SOURCE) for p in relative):
            continue
        if path.is_file() and path.suffix != ".pyc":
            files.append(path)
    return files


def package_digest() -> str:
    """A hash of what rllm-envs' wheel is made from: its source files, or its installed RECORD
    (which holds each installed file's hash)."""
    digest = hashlib.sha256()
    root = source_tree()
    if root is not None:
        for path in _source_files(root):
            digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    else:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
        digest.update((distribution.read_text("RECORD") or distribution.version).encode())
    return digest.hexdigest()


def package_wheel(folder: Path) -> Path:
    """rllm-envs as a wheel in `folder`: built from the source tree, else zipped from the
    installed files."""
    folder.mkdir(parents=True, exist_ok=True)
    root = source_tree()
    if root is None:
        return _wheel_of_installed_files(folder)
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources it builds,
    # and a build/lib left from an earlier build would carry files since deleted.
    copy = folder / "source"
    for path in _source_files(root):
        target = copy / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(copy)]
    if importlib.util.find_spec("setuptools") is not None:
        argv.insert(5, "--no-build-isolation")  # the backend is here: no download of it
    _run(argv, f"building the {DISTRIBUTION} wheel (pip wheel of {root})")
    wheels = sorted(folder.glob("rllm_envs-*.whl"))
    if not wheels:
        raise BuildError(f"pip wheel saved no {DISTRIBUTION} wheel in {folder}")
    return wheels[-1]


def _wheel_of_installed_files(folder: Path) -> Path:
    distribution = importlib.metadata.distribution(DISTRIBUTION)
    wheel = folder / f"rllm_envs-{distribution.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in distribution.files or ():
            parts = PurePosixPath(str(file)).parts
            # Scripts sit outside site-packages (../../bin); bytecode is made where it runs.
            if ".." in parts or "__pycache__" in parts:
                continue
            archive.write(distribution.locate_file(file), str(PurePosixPath(*parts)))
    return wheel


# -- the dependencies ------------------------------------------------------------------------
def resolve(wheel: Path, extras: Iterable[str], python: ImagePython, scratch: Path) -> list[Pinned]:
    """The wheels `wheel` with `extras` needs on `python`, as pip resolves them (itself left
    out)."""
    report = scratch / "pip-report.json"
    requirement = f"{wheel}[{','.join(sorted(extras))}]" if extras else str(wheel)
    # A --target (never written: a dry run) lets pip before 24 take the platform options.
    _run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        + ["--target", str(scratch / "never-written"), "--report", str(report)]
        + ["--only-binary=:all:", *python.pip_options(), requirement],
        f"resolving the wheels for Python {python.version} on {python.machine}",
    )
    pinned = []
    for item in json.loads(report.read_text())["install"]:
        url = item["download_info"]["url"]
        filename = unquote(urlparse(url).path).rsplit("/", 1)[-1]
        if filename == wheel.name:
            continue
        hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
        metadata = item["metadata"]
        pinned.append(Pinned(metadata["name"], metadata["version"], filename, hashes.get("sha256")))
    return pinned


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cached(path: Path, pinned: Pinned) -> bool:
    return path.is_file() and (pinned.sha256 is None or sha256_of(path) == pinned.sha256)


def download(pinned: list[Pinned], python: ImagePython, cache: Path) -> tuple[list[Path], int]:
    """The files of `pinned` in the cache folder, the missing ones downloaded by one pip run;
    and how many were downloaded."""
    folder = cache / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    missing = [p for p in pinned if not _cached(folder / p.filename, p)]
    for stale in missing:  # a file of another content under the same name goes first
        (folder / stale.filename).unlink(missing_ok=True)
    if missing:
        _run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
            + [*python.pip_options(), "-d", str(folder)]
            + [f"{p.name}=={p.version}" for p in missing],
            f"downloading {len(missing)} wheels into {folder}",
        )
    for item in missing:
        if not _cached(folder / item.filename, item):
            raise BuildError(
                f"pip did not save {item.filename} with the index's sha256 in {folder}"
            )
    return [folder / p.filename for p in pinned], len(missing)


# -- laying out site-packages ----------------------------------------------------------------
def unpack(wheel: Path, site: Path) -> None:
    """Unpack `wheel` into the folder `site` as pip installs it into site-packages."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            parts = PurePosixPath(info.filename).parts
            if info.filename.startswith("/") or ".." in parts:
                raise BuildError(f"{wheel.name}: a path outside the wheel: {info.filename}")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in _LIBRARY_DATA:
                    continue
                parts = parts[2:]
            target = site.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, target.open("wb") as copy:
                shutil.copyfileobj(source, copy)
            executable = (info.external_attr >> 16) & 0o111
            target.chmod(0o755 if executable else 0o644)
    for folder in [site, *(path for path in site.rglob("*") if path.is_dir())]:
        folder.chmod(0o755)  # readable by the server's user, whatever this umask


def wheel_summary(paths: Iterable[Path]) -> str:
    """``name==version`` of each wheel file, sorted (for a label and the tests)."""
    names = []
    for path in paths:
        name, version = path.name.split("-")[:2]
        names.append(f"{re.sub(r'[-_.]+', '-', name).lower()}=={version}")
    return " ".join(sorted(names))
