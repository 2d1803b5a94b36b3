"""SWE containers: one per episode (the agent's) and one per grading, with a warm pool.

A container runs the sandbox's trusted server (``rllm_envs/sandbox/container_server.py``) as its
main process, the same one the code sandbox uses: every command arrives over the attached
stdin/stdout, runs as the unprivileged sandbox user with the policy's rlimits and wall-clock
limit, and when it ends every process of that user is killed (nothing runs in the background
between commands) and /scratch is emptied. A command costs a fork and an exec, not a
``docker exec``.

Containers carry the sandbox's labels (``rllm.sandbox=1`` and the owner's host:pid) plus
``rllm.swe=1``: ``close()`` removes them, so does a finaliser at exit, and every new pool first
sweeps away labelled containers whose owner process is gone (a SIGKILLed trainer leaks nothing
past the next start).
"""

from __future__ import annotations

import asyncio
import base64
import json
import select
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any

from rllm_envs.core.async_env import Io
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.sandbox.docker_backend import (
    LABEL,
    OWNER_LABEL,
    _aexchange,
    _close_streams,
    _exchange,
    _remove_all,
    _Worker,
    owner_tag,
    reply_result,
    server_source,
    sweep_orphans,
)
from rllm_envs.sandbox.execution import (
    SCRATCH_DIR,
    ExecutionRequest,
    ExecutionResult,
    sandbox_env,
)
from rllm_envs.sandbox.policy import SandboxPolicy
from rllm_envs.setup.command import setup_command
from rllm_envs.swe.builder.images import OWNED_LABEL
from rllm_envs.swe.builder.projects import image_prefix
from rllm_envs.swe.docker_client import docker_client

SWE_LABEL = "rllm.swe"
# The container's own processes besides the agent's: init, the server, a clean-up helper.
_OVERHEAD_PROCESSES = 4
# What a runner job may answer (test log and report included).
_JOB_OUTPUT_BYTES = 64 << 20
RUNNER_NAME = "testbed_runner.py"
# How long past a command's wall limit the host waits for the server before it gives up.
_REPLY_GRACE_SECONDS = 15.0


def runner_source() -> bytes:
    return resources.files("rllm_envs.swe").joinpath(RUNNER_NAME).read_bytes()


@dataclass(frozen=True)
class ContainerSettings:
    """How SWE containers start: the policy's cgroup limits, no network, no capabilities but
    what the server needs to drop to the sandbox user and clean up after it."""

    policy: SandboxPolicy
    python: str = "python3"  # the image's interpreter that runs the server

    def create_kwargs(self, image: str) -> dict[str, Any]:
        policy = self.policy
        return {
            "image": image,
            "entrypoint": [self.python, "-I", "-S", "-c", server_source()],
            "command": [],
            "init": True,
            "stdin_open": True,
            "user": "0:0",  # the server only; commands run as policy.uid
            "network_mode": "none",
            "tmpfs": {SCRATCH_DIR: f"rw,nosuid,nodev,size={policy.scratch_mb}m,mode=1777"},
            "mem_limit": f"{policy.memory_mb}m",
            "memswap_limit": f"{policy.memory_mb}m",
            "pids_limit": policy.max_processes + _OVERHEAD_PROCESSES,
            "nano_cpus": 1_000_000_000,
            "cap_drop": ["ALL"],
            "cap_add": ["SETUID", "SETGID", "KILL", "CHOWN"],
            "security_opt": ["no-new-privileges"],
            "labels": {LABEL: "1", OWNER_LABEL: owner_tag(), SWE_LABEL: "1"},
            "working_dir": SCRATCH_DIR,
        }


@dataclass
class Workspace:
    """One started container and the stream to its server."""

    client: Any
    settings: ContainerSettings
    image: str
    worker: _Worker
    owned: set[str]
    removed: bool = False
    # Called once the container is gone (a snapshot image counts the containers it serves).
    on_remove: Callable[[], None] | None = None

    @property
    def id(self) -> str:
        return self.worker.container.id

    def run(self, argv: tuple[str, ...] | list[str], **options: Any) -> ExecutionResult:
        """Run `argv` as the sandbox user in /scratch (where `files` are written first); the
        options are :meth:`_framed`'s."""
        return reply_result(self._exchanged(argv, **options))

    async def arun(self, argv: tuple[str, ...] | list[str], **options: Any) -> ExecutionResult:
        """:meth:`run`, awaited: the command's reply is read off the container's stream on the
        running loop. A cancelled run closes the stream (its reply may still come, so the
        container cannot serve another command): the next run, or close, removes it."""
        message, wait = self._framed(argv, **options)
        try:
            return reply_result(self._checked(await _aexchange(self.worker, message, wait)))
        except asyncio.CancelledError:
            _close_streams(self.worker)
            raise
        except InfrastructureFailure:
            await asyncio.to_thread(self.remove)
            raise
        except Exception as error:
            await asyncio.to_thread(self.remove)
            raise InfrastructureFailure("sandbox", f"the container broke: {error}") from error

    def io_run(self, argv: tuple[str, ...] | list[str], **options: Any) -> Io:
        """:meth:`run` as a turn's I/O (:mod:`rllm_envs.core.async_env`)."""
        return Io(lambda: self.run(argv, **options), lambda: self.arun(argv, **options))

    def run_binary(
        self,
        argv: tuple[str, ...] | list[str],
        *,
        stdin: bytes = b"",
        wall_seconds: float | None = None,
        max_output_bytes: int | None = None,
    ) -> tuple[ExecutionResult, bytes]:
        """Like :meth:`run`, with the program's stdout as bytes (e.g. a tar archive) beside
        the result (whose ``stdout`` is then empty)."""
        reply = self._exchanged(
            argv, stdin=stdin, wall_seconds=wall_seconds, max_output_bytes=max_output_bytes
        )
        return reply_result(reply, text_stdout=False), base64.b64decode(reply["stdout"])

    def _exchanged(self, argv: tuple[str, ...] | list[str], **options: Any) -> dict[str, Any]:
        """One request to the container's server; its reply (stdout and stderr in base64). A
        container that broke or whose server failed is removed."""
        message, wait = self._framed(argv, **options)
        try:
            return self._checked(_exchange(self.worker, message, wait))
        except InfrastructureFailure:
            self.remove()
            raise
        except Exception as error:
            self.remove()
            raise InfrastructureFailure("sandbox", f"the container broke: {error}") from error

    def _framed(
        self,
        argv: tuple[str, ...] | list[str],
        *,
        files: Mapping[str, bytes] | None = None,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        wall_seconds: float | None = None,
        max_output_bytes: int | None = None,
    ) -> tuple[bytes, float]:
        """The framed request for the container's server, and how long to wait for its reply."""
        if self.removed:
            raise InfrastructureFailure("sandbox", "the container was already removed")
        policy = self.settings.policy
        request = ExecutionRequest(tuple(argv), dict(files or {}), stdin, dict(env or {}))
        policy.check_files(request.files)
        wall = wall_seconds or policy.wall_seconds
        # Docker's pids cgroup bounds processes; RLIMIT_NPROC would count the uid host-wide.
        rlimits = {k: v for k, v in policy.rlimits().items() if k != "RLIMIT_NPROC"}
        rlimits["RLIMIT_CPU"] = max(rlimits["RLIMIT_CPU"], int(wall + 1))
        body = json.dumps(
            {
                "argv": list(request.argv),
                "files": {n: base64.b64encode(d).decode() for n, d in request.files.items()},
                "env": sandbox_env(request),
                "stdin": base64.b64encode(request.stdin).decode(),
                "rlimits": rlimits,
                "uid": policy.uid,
                "wall_seconds": wall,
                "max_output_bytes": max_output_bytes or policy.max_output_bytes,
            }
        ).encode()
        return b"%010d" % len(body) + body, wall + _REPLY_GRACE_SECONDS

    @staticmethod
    def _checked(reply: dict[str, Any]) -> dict[str, Any]:
        if "error" in reply:  # the caller removes the container
            raise InfrastructureFailure("sandbox", f"the sandbox server failed: {reply['error']}")
        return reply

    def run_job(
        self,
        job: Mapping[str, Any],
        *,
        files: Mapping[str, bytes] | None = None,
        env: Mapping[str, str] | None = None,
        wall_seconds: float = 120.0,
    ) -> dict[str, Any]:
        """Run one job of `testbed_runner.py` (patches in `files`); its JSON reply."""
        result = self.run(
            (self.settings.python, "-I", "-S", f"{SCRATCH_DIR}/{RUNNER_NAME}"),
            files={RUNNER_NAME: runner_source(), **dict(files or {})},
            stdin=json.dumps(job).encode(),
            env=env,
            wall_seconds=wall_seconds,
            max_output_bytes=_JOB_OUTPUT_BYTES,
        )
        try:
            reply = json.loads(result.stdout)
        except ValueError:
            reply = None
        if result.exit_code != 0 or not isinstance(reply, dict):
            detail = (result.stderr or result.stdout).strip()[-1500:]
            raise InfrastructureFailure(
                "sandbox", f"the repository job failed ({result.status}): {detail}"
            )
        return reply

    def give_to_sandbox_user(self, path: str) -> None:
        """chown -R `path` to the sandbox user, as root (images whose repository root owns)."""
        uid = self.settings.policy.uid
        try:
            code, output = self.worker.container.exec_run(
                ["chown", "-R", f"{uid}:{uid}", path], user="0:0"
            )
        except Exception as error:
            raise InfrastructureFailure("sandbox", f"could not prepare {path}: {error}") from error
        if code != 0:
            message = output.decode("utf-8", "replace").strip()[-500:]
            raise InfrastructureFailure("sandbox", f"could not prepare {path}: {message}")

    def alive(self) -> bool:
        # An idle server says nothing; a readable stream means its container went away.
        return not self.removed and not select.select([self.worker.stream], [], [], 0)[0]

    def remove(self) -> None:
        if self.removed:
            return
        self.removed = True
        _close_streams(self.worker)
        try:
            self.worker.container.remove(force=True)
        except Exception:
            pass  # already gone
        self.owned.discard(self.id)
        if self.on_remove is not None:
            self.on_remove()


class WorkspacePool:
    """Starts SWE containers and keeps `spares` started ones per image, ready for the next reset
    or grading (filled in a background thread). A workspace taken is never given back: a used
    container is dirty, so it is removed and a fresh spare started instead."""

    def __init__(
        self,
        settings: ContainerSettings,
        *,
        spares: int = 1,
        base_url: str | None = None,
    ) -> None:
        if spares < 0:
            raise ValueError(f"spares must be at least 0, got {spares}")
        self.client = docker_client(base_url)
        sweep_orphans(self.client)
        self.settings = settings
        self.spares = spares
        self._owned: set[str] = set()
        self._lock = threading.Lock()
        self._ready: dict[str, list[Workspace]] = {}
        self._pending: dict[str, list[Future]] = {}
        self._image_labels: dict[str, dict[str, str]] = {}
        self._filler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="swe-pool")
        self._closed = False
        self.containers_created = 0
        self._finalizer = weakref.finalize(self, _remove_all, self.client, self._owned)

    # -- images ----------------------------------------------------------------------------
    def image_labels(self, image: str) -> dict[str, str]:
        """The image's labels; a missing image is an error that says how to build it."""
        with self._lock:
            known = self._image_labels.get(image)
        if known is not None:
            return known
        try:
            labels = dict(self.client.images.get(image).labels or {})
        except Exception as error:
            hint = (
                f"{setup_command('swe')} builds it"
                if image.startswith(image_prefix())
                else "build or load it into the local Docker engine (no registry is contacted)"
            )
            raise InfrastructureFailure(
                "sandbox", f"the image {image!r} is not available: {hint} ({error})"
            ) from error
        with self._lock:
            self._image_labels[image] = labels
        return labels

    def owns_workdir(self, image: str) -> bool:
        """Whether the image's repository already belongs to the sandbox user."""
        return self.image_labels(image).get(OWNED_LABEL) == str(self.settings.policy.uid)

    # -- containers ------------------------------------------------------------------------
    def start(self, image: str) -> Workspace:
        """A container of `image` started now (no spare is taken or made: a snapshot's image)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this WorkspacePool is closed")
        try:
            container = self.client.containers.create(**self.settings.create_kwargs(image))
        except Exception as error:
            raise InfrastructureFailure(
                "sandbox", f"could not create a container of {image}: {error}"
            ) from error
        self._owned.add(container.id)
        with self._lock:
            self.containers_created += 1
        try:
            attached = self.client.api.attach_socket(
                container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            container.start()
        except Exception as error:
            try:
                container.remove(force=True)
            except Exception:
                pass
            self._owned.discard(container.id)
            raise InfrastructureFailure(
                "sandbox", f"could not start a container of {image}: {error}"
            ) from error
        worker = _Worker(container, getattr(attached, "_sock", attached), attached)
        return Workspace(self.client, self.settings, image, worker, self._owned)

    def _fill(self, image: str) -> None:
        try:
            workspace = self.start(image)
        except Exception:  # the next take() starts one itself and reports what fails
            return
        with self._lock:
            if not self._closed:
                self._ready.setdefault(image, []).append(workspace)
                return
        workspace.remove()

    def prewarm(self, image: str) -> None:
        """Start spares of `image` in the background, up to `spares` ready or on the way."""
        with self._lock:
            if self._closed:
                return
            pending = [f for f in self._pending.get(image, []) if not f.done()]
            missing = self.spares - len(self._ready.get(image, [])) - len(pending)
            for _ in range(max(0, missing)):
                pending.append(self._filler.submit(self._fill, image))
            self._pending[image] = pending

    def take(self, image: str) -> Workspace:
        """A started container of `image` that nobody used, and a spare started to replace it."""
        self.image_labels(image)
        while True:
            with self._lock:
                ready = self._ready.get(image, [])
                workspace = ready.pop() if ready else None
            if workspace is None:
                workspace = self.start(image)
                break
            if workspace.alive():
                break
            workspace.remove()
        self.prewarm(image)
        return workspace

    @property
    def container_ids(self) -> frozenset[str]:
        return frozenset(self._owned)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ready, self._ready = self._ready, {}
        self._filler.shutdown(wait=True, cancel_futures=True)
        for workspaces in ready.values():
            for workspace in workspaces:
                _close_streams(workspace.worker)
        self._finalizer()
