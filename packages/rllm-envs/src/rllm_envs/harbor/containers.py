"""Docker for Harbor tasks: each task's image, and the containers an episode runs in.

A task's image is its ``docker_image`` (from the local engine, pulled when missing), or its
``environment/`` folder built as ``rllm-harbor/<task>:<digest of the folder>``, so an edited
folder builds anew and an unchanged one is reused. A container runs ``sleep infinity`` under
Docker's init with the task's CPU and memory limits, a process limit, no network unless the
env allows it, and no added privileges; commands reach it by ``docker exec`` (Harbor's images
need not hold a Python). Containers carry the sandbox's owner labels, so one left by a killed
process is swept by the next start (:func:`rllm_envs.sandbox.docker_backend.sweep_orphans`).
"""

from __future__ import annotations

import hashlib
import io
import re
import shlex
import shutil
import tarfile
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.harbor.task_folder import HarborTask
from rllm_envs.sandbox.docker_backend import LABEL, OWNER_LABEL, owner_tag
from rllm_envs.sandbox.docker_images import BuildError, build_image
from rllm_envs.setup.command import setup_command

IMAGE_PREFIX = "rllm-harbor/"
HARBOR_LABEL = "rllm.harbor"
RECIPE_LABEL = "rllm.harbor.recipe"
# Processes a task's commands may start together (a fork bomb stops here).
MAX_PROCESSES = 512
# How long past a command's own limit the host waits before it calls the container broken.
_GRACE_SECONDS = 15.0
_SLUG = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    output: str  # stdout and stderr together, as a terminal shows them
    timed_out: bool


# Part of every image's digest: a change to how images are built makes them build anew.
BUILD_RECIPE_VERSION = "1"


def folder_digest(folder: Path) -> str:
    """A hash of every file's path, mode and bytes under `folder` (what a build reads)."""
    digest = hashlib.sha256(BUILD_RECIPE_VERSION.encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(
            f"{path.relative_to(folder).as_posix()}\0{path.stat().st_mode & 0o111}\0".encode()
        )
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def image_tag(task: HarborTask, folder: Path) -> str:
    slug = _SLUG.sub("-", task.name.lower()).strip("-._") or "task"
    return f"{IMAGE_PREFIX}{slug[:100]}:{folder_digest(folder)}"


def _present(client: Any, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except Exception:
        return False


def build_folder(client: Any, task: HarborTask, folder: Path, *, nocache: bool = False) -> str:
    """`folder` (holding a Dockerfile) built as the task's image; reused when already built."""
    tag = image_tag(task, folder)
    if _present(client, tag) and not nocache:
        return tag
    with tempfile.TemporaryDirectory(prefix="rllm-harbor-build-") as scratch:
        context = Path(scratch) / "context"
        shutil.copytree(folder, context, symlinks=True)
        try:
            build_image(
                client,
                context,
                tag,
                {HARBOR_LABEL: "1", RECIPE_LABEL: tag.rpartition(":")[2]},
                nocache=nocache,
            )
        except BuildError as error:
            raise InfrastructureFailure(
                "sandbox",
                f"the image of Harbor task {task.name!r} did not build ({folder}); its base "
                f"must be in the local engine or pullable ({setup_command('harbor')} provides "
                f"debian:bookworm-slim where no registry is reachable): {error}",
            ) from error
    return tag


def task_image(client: Any, task: HarborTask, *, nocache: bool = False) -> str:
    """The image the task's agent container runs (built or pulled when missing)."""
    if task.docker_image is None:
        return build_folder(client, task, task.environment_dir, nocache=nocache)
    if not _present(client, task.docker_image):
        try:
            client.images.pull(task.docker_image)
        except Exception as error:
            raise InfrastructureFailure(
                "sandbox",
                f"Harbor task {task.name!r} runs {task.docker_image}, which is not in the local "
                f"engine and could not be pulled: {error}",
            ) from error
    return task.docker_image


def verifier_image(client: Any, task: HarborTask, agent_image: str) -> str:
    """A separate verifier's image: tests/ built (holding the tests) or the task's own."""
    if task.bundles_tests:
        return build_folder(client, task, task.tests_dir)
    return agent_image


def _tar(entries: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = (modes or {}).get(name, 0o644)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def folder_tar(folder: Path) -> bytes:
    """`folder`'s files as a tar (paths relative to it, modes kept)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(folder.rglob("*")):
            archive.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    return buffer.getvalue()


@dataclass
class TaskContainer:
    """One started container of a task: commands by ``docker exec``, files by archives."""

    client: Any
    container: Any
    workdir: str
    removed: bool = False
    _finalizer: Any = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        client: Any,
        image: str,
        task: HarborTask,
        *,
        allow_network: bool = False,
        role: str = "agent",
    ) -> TaskContainer:
        try:
            container = client.containers.run(
                image,
                command=["sh", "-c", "sleep infinity"],
                entrypoint=[],
                detach=True,
                init=True,
                user="0:0",
                network_mode="bridge" if allow_network else "none",
                mem_limit=f"{task.memory_mb}m",
                memswap_limit=f"{task.memory_mb}m",
                nano_cpus=int(task.cpus * 1e9),
                pids_limit=MAX_PROCESSES,
                security_opt=["no-new-privileges"],
                labels={LABEL: "1", OWNER_LABEL: owner_tag(), HARBOR_LABEL: role},
            )
        except Exception as error:
            raise InfrastructureFailure(
                "sandbox", f"could not start a container of {image}: {error}"
            ) from error
        workdir = (client.images.get(image).attrs.get("Config") or {}).get("WorkingDir") or "/"
        started = cls(client, container, workdir)
        started._finalizer = weakref.finalize(started, _force_remove, container)
        return started

    @property
    def id(self) -> str:
        return self.container.id

    def exec(
        self,
        command: str,
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        max_output_bytes: int = 1 << 20,
    ) -> CommandResult:
        """`command` run by bash in the working directory, killed after `timeout` seconds."""
        if self.removed:
            raise InfrastructureFailure("sandbox", "the task's container was already removed")
        argv = ["timeout", "-k", "2", f"{timeout:g}", "bash", "-c", command]
        api = self.client.api
        try:
            created = api.exec_create(
                self.id, argv, workdir=self.workdir, environment=env or None, user="0:0"
            )
            api.timeout = timeout + _GRACE_SECONDS  # this env's own client: one call at a time
            raw = api.exec_start(created["Id"])
            code = api.exec_inspect(created["Id"]).get("ExitCode")
        except Exception as error:
            self.remove()
            raise InfrastructureFailure(
                "sandbox", f"the task's container broke: {error}"
            ) from error
        output = raw[-max_output_bytes:].decode("utf-8", "replace") if raw else ""
        code = -1 if code is None else int(code)
        return CommandResult(code, output, timed_out=code in (124, 137))

    def put_files(self, target: str, entries: dict[str, bytes], modes: dict[str, int]) -> None:
        self._put(target, _tar(entries, modes))

    def put_folder(self, target: str, folder: Path) -> None:
        self._put(target, folder_tar(folder))

    def _put(self, target: str, archive: bytes) -> None:
        self.exec(f"mkdir -p {shlex.quote(target)}", timeout=30)
        try:
            ok = self.container.put_archive(target, archive)
        except Exception as error:
            raise InfrastructureFailure(
                "sandbox", f"could not copy into {target}: {error}"
            ) from error
        if not ok:
            raise InfrastructureFailure("sandbox", f"could not copy into {target}")

    def get_archive(self, path: str) -> bytes | None:
        """`path` (a file or folder) as a tar whose top entry is its basename; None if absent."""
        try:
            stream, _ = self.container.get_archive(path)
            return b"".join(stream)
        except Exception:  # no such path
            return None

    def read_file(self, path: str, limit: int = 1 << 20) -> bytes | None:
        archive = self.get_archive(path)
        if archive is None:
            return None
        with tarfile.open(fileobj=io.BytesIO(archive)) as opened:
            member = opened.next()
            if member is None or not member.isfile() or member.size > limit:
                return None
            handle = opened.extractfile(member)
            return handle.read() if handle is not None else None

    def copy_into(self, other: TaskContainer, path: str) -> bool:
        """`path` (a file or folder) of this container put at the same path in `other`, in
        place of what is there; False when this container has no such path."""
        archive = self.get_archive(path)
        if archive is None:
            return False
        target = PurePosixPath(path.rstrip("/") or "/")
        # The archive's top entry is the path's own name: it unpacks in the parent folder.
        other.exec(f"rm -rf {shlex.quote(str(target))}", timeout=30)
        other._put(str(target.parent), archive)
        return True

    def stop_processes(self) -> None:
        """Every process in the container killed (the files stay): what the agent left running
        cannot touch what follows. The container starts again, bare."""
        try:
            self.container.kill()
            self.container.wait(timeout=30)
            self.container.start()
        except Exception as error:
            self.remove()
            raise InfrastructureFailure(
                "sandbox", f"could not stop the agent's processes: {error}"
            ) from error

    def remove(self) -> None:
        if self.removed:
            return
        self.removed = True
        if self._finalizer is not None:
            self._finalizer.detach()
        _force_remove(self.container)


def _force_remove(container: Any) -> None:
    try:
        container.remove(force=True)
    except Exception:
        pass  # already gone
