"""Stage ``rootfs``: a minimal Debian root filesystem, made with debootstrap, as a Docker image.

No registry is needed: debootstrap fetches Debian's packages from a mirror, and the tree is
imported into the local engine (``docker import``). The SWE images are built on it, and so is
the sandbox image where the official Python image cannot be pulled. The image carries its
recipe (suite, variant, packages, what is pruned); a present image is kept unless its recorded
recipe differs or ``--force`` is given. An image without a recorded recipe is kept too: it
cannot be judged, and rebuilding it would rebuild everything on top of it.

What this stage cannot do itself is named in one line: debootstrap missing, not root (debootstrap
creates device files and changes ownership), no answer from the mirror.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rllm_envs.sandbox.docker_images import image_labels
from rllm_envs.setup.base import SetupError, SetupRun, Stage, StageFailed, StageProgress, short

SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES = ("python3",)
# Package caches and documentation are not needed to run code and only slow the import down:
# (folder, glob) pairs, relative to the root.
PRUNED = (
    ("var/cache/apt/archives", "*.deb"),
    ("var/lib/apt/lists", "*"),
    ("usr/share", "doc"),
    ("usr/share", "man"),
    ("usr/share", "locale"),
)
RECIPE_LABEL = "rllm.rootfs.recipe"
MIRROR_VARIABLE = "RLLM_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MIRROR_TIMEOUT_SECONDS = 15
# debootstrap's last lines go into an error when it fails.
_LOG_LINES = 30


def recipe() -> str:
    parts = [SUITE, VARIANT, *PACKAGES, *(f"{folder}/{pattern}" for folder, pattern in PRUNED)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def default_mirror() -> str:
    return os.environ.get(MIRROR_VARIABLE) or DEFAULT_MIRROR


def mirror_problem(mirror: str, timeout: float = MIRROR_TIMEOUT_SECONDS) -> str | None:
    """Why the suite's Release file cannot be fetched from `mirror`, or None when it can."""
    url = f"{mirror.rstrip('/')}/dists/{SUITE}/Release"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except (urllib.error.URLError, OSError, ValueError) as error:
        return f"{url}: {short(error)}"


def preflight_problem(
    debootstrap: str | None, is_root: bool, mirror: str, unreachable: str | None
) -> str | None:
    """The one-line error for the first part debootstrap lacks, or None when all are there."""
    if debootstrap is None:
        return "debootstrap is missing (it builds the Debian rootfs): apt-get install debootstrap"
    if not is_root:
        return (
            "debootstrap must run as root to build the Debian rootfs: run this command as root "
            "(sudo), or give the sandbox image a registry base (--sandbox-base python)"
        )
    if unreachable is not None:
        return (
            f"the Debian mirror {mirror} does not answer ({unreachable}): give a reachable one "
            f"with --debian-mirror or {MIRROR_VARIABLE}"
        )
    return None


def ensure_rootfs(run: SetupRun, progress: StageProgress) -> str:
    client = run.docker()
    tag = run.options.rootfs_image
    labels = image_labels(client, tag)
    if labels is not None and not run.options.force:
        recorded = labels.get(RECIPE_LABEL)
        if recorded is None:
            return f"{tag} present (no recorded recipe: kept; --force rebuilds it)"
        if recorded == recipe():
            return f"{tag} up to date"
        progress.note(f"{tag} was made from another recipe: rebuilding")
    mirror = run.options.debian_mirror or default_mirror()
    progress.note(f"checking {mirror}")
    problem = preflight_problem(
        shutil.which("debootstrap"), os.geteuid() == 0, mirror, mirror_problem(mirror)
    )
    if problem is not None:
        raise SetupError(problem)
    with scratch_folder() as folder:
        root = folder / "root"
        debootstrap(root, mirror, progress)
        prune(root)
        progress.note(f"importing the tree into Docker as {tag}")
        import_tree(client, root, tag)
    return f"built {tag} (debootstrap {SUITE}/{VARIANT} from {mirror})"


def debootstrap(root: Path, mirror: str, progress: StageProgress) -> None:
    argv = [
        "debootstrap",
        f"--variant={VARIANT}",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(root),
        mirror,
    ]
    tail: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            tail.append(line.rstrip())
            if line.startswith("I: "):  # debootstrap's progress lines: "I: Retrieving ..."
                progress.note(f"debootstrap: {line[3:].strip()}")
        code = process.wait()
    finally:
        if process.poll() is None:  # interrupted: leave no debootstrap behind
            process.kill()
            process.wait()
    if code != 0:
        raise StageFailed(f"debootstrap exited with status {code}:\n" + "\n".join(tail))


def prune(root: Path) -> None:
    for folder, pattern in PRUNED:
        for path in (root / folder).glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def import_tree(client: Any, root: Path, tag: str) -> None:
    """``tar -C root -c . | docker import - tag``, streamed: the tree is never a file on disk."""
    from docker.utils import parse_repository_tag

    repository, version = parse_repository_tag(tag)
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    try:
        reply = client.api.import_image(
            src=tar.stdout,
            repository=repository,
            tag=version or "latest",
            changes=[f'LABEL {RECIPE_LABEL}="{recipe()}"'],
            stream_src=True,
        )
    except Exception as error:
        raise StageFailed(f"docker import of the rootfs as {tag} failed: {error}") from error
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
    if tar.returncode != 0 or '"error"' in str(reply):
        # A tar that failed may have sent a partial tree: an image of it must not stay.
        with contextlib.suppress(Exception):
            client.images.remove(tag)
        raise StageFailed(
            f"importing the rootfs as {tag} failed (tar status {tar.returncode}): {short(reply)}"
        )


@contextlib.contextmanager
def scratch_folder() -> Iterator[Path]:
    """A temporary folder for the tree, removed afterwards, failures included. debootstrap
    mounts /proc and /sys inside the tree while it runs; a run that died may leave them
    mounted, and deleting through a mount would reach the host's files, so they go first."""
    folder = Path(tempfile.mkdtemp(prefix="rllm-rootfs-"))
    try:
        yield folder
    finally:
        for mount in mounts_below(folder):
            subprocess.run(["umount", "--lazy", str(mount)], capture_output=True, check=False)
        if not mounts_below(folder):
            shutil.rmtree(folder, ignore_errors=True)


def mounts_below(folder: Path) -> list[Path]:
    """Mount points inside `folder`, deepest first (the order to unmount them in)."""
    try:
        table = Path("/proc/self/mounts").read_text()
    except OSError:
        return []
    inside = []
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        # /proc/self/mounts escapes spaces and other bytes in octal (\040).
        point = Path(fields[1].encode().decode("unicode_escape"))
        if point == folder or folder in point.parents:
            inside.append(point)
    return sorted(inside, key=lambda path: len(path.parts), reverse=True)


STAGE = Stage("rootfs", "Debian rootfs image (debootstrap)", ensure_rootfs)
