"""Capturing the agent's container of an SWE episode, two ways (``SNAPSHOT_METHODS``).

``"tar"``: the sandbox server runs ``tar`` over every place the agent can write that outlives a
command (:data:`WRITABLE_ROOTS`: the repository, /tmp, /var/tmp, /run/lock, /dev/shm) and the
archive is kept in Python as bytes. Restoring syncs it into a container of the task's image
(the env's own when it is alive, else a fresh one from the pool): ``workspace_sync.py`` rewrites
only the files that differ and removes what the archive lacks. Nothing outside Python is held:
the snapshot outlives its env, pickles, and needs no release.

``"commit"``: ``docker commit`` of the container; restoring starts a new container from that
image. The image is Docker's to hold: it is removed once the snapshot is released and no
container started from it is left (Docker cannot remove an image a container runs), or when
the snapshot is garbage-collected, and images of a process that died are swept by the next
env that starts. Everything in the container's own layer is kept (also outside the roots
above); tmpfs mounts (/dev/shm, /scratch) are not.

``"auto"`` (the env's default): tar for a workspace up to :data:`AUTO_TAR_LIMIT_BYTES`, commit
above. The archive travels through the sandbox server, so tar costs grow with the workspace,
while a commit costs a few hundred milliseconds at any size; on the shipped projects (about a
megabyte with the git repository) tar is the faster on both sides, and a restore into a
container that already runs the task's image (what a trainer restoring its own envs does)
rewrites only what changed (docs/envs/snapshots-containers.md has the figures).

Both keep file contents, modes, modification times, links and deletions; neither keeps inode
numbers or change times. /scratch is emptied after every command: nothing of it to keep.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.snapshots import SnapshotUnsupported
from rllm_envs.sandbox.docker_backend import LABEL, OWNER_LABEL, _owner_alive, owner_tag
from rllm_envs.sandbox.execution import SCRATCH_DIR
from rllm_envs.swe.containers import Workspace, WorkspacePool
from rllm_envs.swe.grading import prepare_workdir
from rllm_envs.swe.tasks import SWETask

# Where the sandbox user can write, besides the repository, that outlives a command (/scratch
# is emptied after each one). A root the image lacks is skipped.
WRITABLE_ROOTS = ("/tmp", "/var/tmp", "/run/lock", "/dev/shm")
# The largest workspace archive the tar method takes (it travels through the server's reply).
TAR_LIMIT_BYTES = 256 << 20
TAR_SECONDS = 120.0
# Where "auto" switches from tar to commit: about where the two cost the same (the figures).
AUTO_TAR_LIMIT_BYTES = 4 << 20
SNAPSHOT_LABEL = "rllm.swe.snapshot"

# $@ are the roots. Their contents go in, not the roots themselves (some belong to root, whose
# metadata the sandbox user cannot set back), named relative to / so they unpack in place; the
# POSIX format keeps modification times to the nanosecond.
_PACK = (
    'cd / && for root do if [ -d "$root" ]; then find "${root#/}" -mindepth 1 -maxdepth 1 '
    "-print0; fi; done | tar --create --file=- --numeric-owner --null --files-from=- "
    "--format=posix --pax-option=delete=atime,delete=ctime"
)
SYNC_PROGRAM = "workspace_sync.py"


def sync_source() -> bytes:
    return resources.files("rllm_envs.swe").joinpath(SYNC_PROGRAM).read_bytes()


class WorkspaceCapture(Protocol):
    """What a method took of the agent's container."""

    def restore(self, pool: WorkspacePool, current: Workspace | None, task: SWETask) -> Workspace:
        """A started container holding the captured workspace; `current` (the restoring env's
        container) is reused or removed."""
        ...

    def release(self) -> None:
        """Free what the capture holds outside Python (idempotent)."""
        ...


def workspace_roots(task: SWETask) -> tuple[str, ...]:
    return (task.workdir, *WRITABLE_ROOTS)


def _shell(script: str, roots: tuple[str, ...]) -> tuple[str, ...]:
    return ("sh", "-c", script, "sh", *roots)


@dataclass(frozen=True)
class WorkspaceTar:
    """The workspace's roots as one tar archive (made inside the container)."""

    image: str
    roots: tuple[str, ...]
    archive: bytes

    @classmethod
    def take(cls, pool: WorkspacePool, workspace: Workspace, task: SWETask) -> WorkspaceTar:
        roots = workspace_roots(task)
        result, archive = workspace.run_binary(
            _shell(_PACK, roots), wall_seconds=TAR_SECONDS, max_output_bytes=TAR_LIMIT_BYTES
        )
        if result.output_truncated:
            raise SnapshotUnsupported(
                f"the workspace of {task.instance_id} is larger than the tar method takes "
                f"({TAR_LIMIT_BYTES >> 20} MiB): use snapshot_method='commit'"
            )
        if not result.ok:
            raise InfrastructureFailure(
                "sandbox", f"could not archive the workspace ({result.status}): {result.stderr}"
            )
        return cls(workspace.image, roots, archive)

    def restore(self, pool: WorkspacePool, current: Workspace | None, task: SWETask) -> Workspace:
        if current is not None and current.image == self.image and current.alive():
            target = current
        else:
            if current is not None:
                current.remove()
            target = pool.take(self.image)
            prepare_workdir(pool, target, task)
        python = pool.settings.python
        result = target.run(
            (python, "-I", "-S", f"{SCRATCH_DIR}/{SYNC_PROGRAM}", *self.roots),
            files={SYNC_PROGRAM: sync_source()},
            stdin=self.archive,
            wall_seconds=TAR_SECONDS,
        )
        if not result.ok:
            target.remove()
            raise InfrastructureFailure(
                "sandbox", f"could not unpack the workspace ({result.status}): {result.stderr}"
            )
        return target

    def release(self) -> None:
        """Nothing to free: the archive is plain bytes."""


class WorkspaceImage:
    """The container committed to an image; removed once released and no container of it is
    left (see the module docstring)."""

    def __init__(self, client: Any, image_id: str, task_image: str) -> None:
        self.client = client
        self.image_id = image_id
        self.task_image = task_image
        self._lock = threading.Lock()
        self._containers = 0
        self._released = False
        # Garbage collection or interpreter exit without a release: the image goes anyway.
        self._finalizer = weakref.finalize(self, remove_snapshot_image, client, image_id)

    @classmethod
    def take(cls, pool: WorkspacePool, workspace: Workspace, task: SWETask) -> WorkspaceImage:
        labels = {SNAPSHOT_LABEL: "1", OWNER_LABEL: owner_tag()}
        try:
            committed = pool.client.api.commit(workspace.id, conf={"Labels": labels})
        except Exception as error:
            raise InfrastructureFailure(
                "sandbox", f"could not commit the container: {error}"
            ) from error
        return cls(pool.client, committed["Id"], workspace.image)

    @property
    def exists(self) -> bool:
        try:
            self.client.images.get(self.image_id)
        except Exception:  # NotFound
            return False
        return True

    def restore(self, pool: WorkspacePool, current: Workspace | None, task: SWETask) -> Workspace:
        with self._lock:
            if self._released:
                raise ValueError("this snapshot's image was released")
            self._containers += 1
        if current is not None:
            current.remove()
        try:
            workspace = pool.start(self.image_id)
        except BaseException:
            self._container_gone()
            raise
        workspace.image = self.task_image  # what the container serves, for later restores
        workspace.on_remove = self._container_gone
        return workspace

    def _container_gone(self) -> None:
        with self._lock:
            self._containers -= 1
            removable = self._released and self._containers == 0
        if removable:
            self._finalizer()

    def release(self) -> None:
        with self._lock:
            self._released = True
            removable = self._containers == 0
        if removable:
            self._finalizer()


def remove_snapshot_image(client: Any, image_id: str) -> None:
    """Remove a snapshot image and whatever containers of it are left (at exit: the pools'
    own clean-up may come after this one)."""
    try:
        for container in client.containers.list(
            all=True, filters={"ancestor": image_id, "label": f"{LABEL}=1"}, ignore_removed=True
        ):
            container.remove(force=True)
        client.images.remove(image_id, force=True)
    except Exception:
        pass  # already gone, or the engine is: the next sweep takes it


def sweep_snapshot_images(client: Any) -> int:
    """Remove snapshot images whose owner process is gone; return how many."""
    removed = 0
    for image in client.images.list(filters={"label": f"{SNAPSHOT_LABEL}=1"}):
        if not _owner_alive((image.labels or {}).get(OWNER_LABEL, "")):
            remove_snapshot_image(client, image.id)
            removed += 1
    return removed


def workspace_bytes(workspace: Workspace, task: SWETask) -> int:
    """The apparent size of the workspace's roots (what a tar of them would hold)."""
    result = workspace.run(
        ("du", "--summarize", "--apparent-size", "--block-size=1", *workspace_roots(task))
    )
    # A root the image lacks makes du complain and exit 1; the others are still listed.
    return sum(int(line.split()[0]) for line in result.stdout.splitlines() if line.strip())


def take_by_size(pool: WorkspacePool, workspace: Workspace, task: SWETask) -> WorkspaceCapture:
    """The tar method for a workspace up to AUTO_TAR_LIMIT_BYTES, else the commit method: the
    archive travels through the sandbox server at some tens of MB/s, while a commit costs a
    few hundred milliseconds whatever the size (docs/envs/snapshots-containers.md)."""
    if workspace_bytes(workspace, task) <= AUTO_TAR_LIMIT_BYTES:
        return WorkspaceTar.take(pool, workspace, task)
    return WorkspaceImage.take(pool, workspace, task)


SNAPSHOT_METHODS: Mapping[str, Callable[[WorkspacePool, Workspace, SWETask], WorkspaceCapture]] = {
    "auto": take_by_size,
    "tar": WorkspaceTar.take,
    "commit": WorkspaceImage.take,
}


@dataclass(frozen=True)
class SWEEpisodeState:
    """An SWE episode beyond the base fields: the task, the repository's one commit, and the
    agent's container (None once the episode ended and the container is gone)."""

    swe_task: SWETask | None
    base_commit: str
    workspace: WorkspaceCapture | None

    def release(self) -> None:
        if self.workspace is not None:
            self.workspace.release()
