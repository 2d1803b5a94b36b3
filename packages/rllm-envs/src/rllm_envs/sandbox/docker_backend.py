"""The `docker` backend: the same policy, in containers of a real Docker engine.

Containers run the image `rllm-envs setup code` builds (`rllm-sandbox:1`, or the name in
RLLM_SANDBOX_IMAGE, see `image_names.py`), with a read-only root, a
size-capped tmpfs at /scratch, no network, `no-new-privileges`, and cgroup limits on memory,
processes and CPU. Their main process is a small trusted server (`container_server.py`, root
with only CAP_SETUID/CAP_SETGID/CAP_KILL/CAP_CHOWN) that runs each request as the unprivileged
sandbox uid with no capabilities, and kills everything of that uid and empties /scratch after.
The host talks to it over the container's attached stdin/stdout, so a warm run costs a fork and
an exec, not a `docker exec`. A warm pool keeps up to `pool_size` containers; `pool_size=0`
starts a fresh container for every run (cold).

Every container carries the label `rllm.sandbox=1` and its owner's host and pid; `close()`
removes them, so does a finaliser at interpreter exit, and each new sandbox first sweeps away
labelled containers whose owner process has died (a crashed trainer leaks nothing for long).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import select
import socket
import struct
import threading
import time
import weakref
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from rllm_envs.core.extras import require_extra
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.sandbox.bwrap import MissingEngineError
from rllm_envs.sandbox.egress import MOUNT_POINT, EgressProxy
from rllm_envs.sandbox.execution import (
    SCRATCH_DIR,
    ExecutionRequest,
    ExecutionResult,
    sandbox_env,
)
from rllm_envs.sandbox.image_names import sandbox_image
from rllm_envs.sandbox.policy import SandboxPolicy
from rllm_envs.setup.command import setup_command

# What to do when no engine answers: the one part `rllm-envs setup` cannot make itself.
ENGINE_FIX = "install Docker (Debian: apt-get install docker.io) and start its engine (dockerd)"


def engine_fix(base_url: str | None = None) -> str:
    """What to do when no engine answers. Where the address was chosen (`base_url`, or
    DOCKER_HOST), the engine may well be installed and only the address wrong: say so."""
    chosen = base_url or os.environ.get("DOCKER_HOST")
    if not chosen:
        return ENGINE_FIX
    source = "the address given" if base_url else "DOCKER_HOST"
    return (
        f"{source} is {chosen}: start a Docker engine there (dockerd -H {chosen}), or correct "
        f"it (unset DOCKER_HOST to use the local engine)"
    )


LABEL = "rllm.sandbox"
OWNER_LABEL = "rllm.sandbox.owner"
# Processes the container itself needs besides the code: its init, the server, a clean-up helper.
_CONTAINER_OVERHEAD_PROCESSES = 4
# How long past the policy's wall limit the host waits for the server's reply before it
# declares the container broken.
_REPLY_GRACE_SECONDS = 10.0


def server_source() -> str:
    return resources.files("rllm_envs.sandbox").joinpath("container_server.py").read_text("utf-8")


def owner_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(tag: str) -> bool:
    host, _, pid = tag.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's container: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphans(client: Any) -> int:
    """Remove labelled sandbox containers whose owner process is gone; return how many."""
    removed = 0
    # The SDK inspects every container it lists; ignore_removed keeps one that another process
    # removes meanwhile from failing the whole listing with NotFound.
    listed = client.containers.list(all=True, filters={"label": f"{LABEL}=1"}, ignore_removed=True)
    for container in listed:
        if not _owner_alive(container.labels.get(OWNER_LABEL, "")):
            try:
                container.remove(force=True)
                removed += 1
            except Exception:  # already gone, or being removed by its owner right now
                continue
    return removed


def _remove_all(client: Any, container_ids: set[str]) -> None:
    for container_id in list(container_ids):
        try:
            client.api.remove_container(container_id, force=True)
        except Exception:
            pass  # already removed
        container_ids.discard(container_id)


def connect(base_url: str | None = None, extra: str = "code") -> Any:
    """A connected docker SDK client, or an error saying what to install or start; `extra` is
    the rllm-envs extra (and setup target) of the env asking."""
    require_extra(extra, "docker")
    import docker

    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except Exception as error:
        raise MissingEngineError(
            f"a running Docker engine is needed: {engine_fix(base_url)}, then "
            f"{setup_command(extra)} "
            f"({error})"
        ) from error
    return client


@dataclass
class _Worker:
    """A started container and the attached stream to its server."""

    container: Any
    stream: socket.socket
    handle: Any  # what attach_socket returned (it wraps `stream`); closed with it
    pending: bytearray = field(default_factory=bytearray)  # stdout bytes not yet parsed
    partial: bytes = b""  # the start of a multiplexed frame not yet complete


@dataclass
class DockerSandbox:
    """Runs requests in pooled containers. `pool_size=0` gives a fresh container per run."""

    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    image: str = field(default_factory=sandbox_image)
    pool_size: int = 2
    base_url: str | None = None

    def __post_init__(self) -> None:
        self._client = connect(self.base_url)
        try:
            self._client.images.get(self.image)
        except Exception as error:
            raise MissingEngineError(
                f"the sandbox image {self.image!r} is missing: "
                f"{setup_command('code', sandbox_image=self.image)} builds it"
            ) from error
        sweep_orphans(self._client)
        # Containers have network "none"; an allowlist is served through this proxy's socket.
        self._egress = EgressProxy(self.policy.network_allowlist) if self.policy.network else None
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._owned: set[str] = set()
        self._closed = False
        # Containers created so far (the benchmark checks that a cold run starts its own).
        self.containers_created = 0
        # Runs at close() or garbage collection, and at interpreter exit (atexit) otherwise.
        self._finalizer = weakref.finalize(self, _remove_all, self._client, self._owned)

    # -- containers ------------------------------------------------------------------------
    def _create(self) -> _Worker:
        policy = self.policy
        try:
            container = self._client.containers.create(
                self.image,
                ["python3", "-I", "-S", "-c", server_source()],
                init=True,
                stdin_open=True,
                user="0:0",  # the server only; programs run as policy.uid
                read_only=True,
                network_mode="none",
                tmpfs={SCRATCH_DIR: f"rw,nosuid,nodev,size={policy.scratch_mb}m,mode=1777"},
                mem_limit=f"{policy.memory_mb}m",
                memswap_limit=f"{policy.memory_mb}m",
                pids_limit=policy.max_processes + _CONTAINER_OVERHEAD_PROCESSES,
                nano_cpus=1_000_000_000,
                cap_drop=["ALL"],
                # The server drops to policy.uid for each program (which keeps no capability)
                # and kills what the program left behind.
                # (CHOWN: to hand it its stdin/stdout pipes.)
                cap_add=["SETUID", "SETGID", "KILL", "CHOWN"],
                security_opt=["no-new-privileges"],
                labels={LABEL: "1", OWNER_LABEL: owner_tag()},
                working_dir=SCRATCH_DIR,
                volumes=self._egress_volume(),
            )
        except Exception as error:
            raise InfrastructureFailure(
                "sandbox", f"could not create a container: {error}"
            ) from error
        self._owned.add(container.id)
        with self._lock:
            self.containers_created += 1
        try:
            # Attach before starting, so not a byte of the server's replies is missed.
            attached = self._client.api.attach_socket(
                container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            container.start()
        except Exception as error:
            self._remove_container(container)
            raise InfrastructureFailure(
                "sandbox", f"could not start a container: {error}"
            ) from error
        return _Worker(container, getattr(attached, "_sock", attached), attached)

    def _egress_volume(self) -> dict[str, dict[str, str]]:
        if self._egress is None:
            return {}
        return {self._egress.folder: {"bind": MOUNT_POINT, "mode": "ro"}}

    def _remove_container(self, container: Any) -> None:
        try:
            container.remove(force=True)
        except Exception:
            pass  # already gone
        self._owned.discard(container.id)

    def _discard(self, worker: _Worker) -> None:
        _close_streams(worker)
        self._remove_container(worker.container)

    def _acquire(self) -> _Worker:
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("this DockerSandbox is closed")
                if not self._idle:
                    break
                worker = self._idle.pop()
            # An idle server says nothing; a readable stream means its container went away.
            if not select.select([worker.stream], [], [], 0)[0]:
                return worker
            self._discard(worker)
        return self._create()

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(worker)
                return
        self._discard(worker)

    # -- runs ------------------------------------------------------------------------------
    def _message(self, request: ExecutionRequest) -> bytes:
        # Docker's pids cgroup bounds processes per container; RLIMIT_NPROC would count the
        # uid across every container on the host, so it is left to the cgroup.
        rlimits = {k: v for k, v in self.policy.rlimits().items() if k != "RLIMIT_NPROC"}
        egress = self._egress
        body = json.dumps(
            {
                "argv": egress.wrap(request.argv) if egress else list(request.argv),
                "files": {n: base64.b64encode(d).decode() for n, d in request.files.items()},
                "env": sandbox_env(request, egress.environment() if egress else {}),
                "stdin": base64.b64encode(request.stdin).decode(),
                "rlimits": rlimits,
                "uid": self.policy.uid,
                "wall_seconds": self.policy.wall_seconds,
                "max_output_bytes": self.policy.max_output_bytes,
            }
        ).encode()
        return b"%010d" % len(body) + body

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        self.policy.check_files(request.files)
        message = self._message(request)
        worker = self._acquire()
        try:
            reply = _exchange(worker, message, self.policy.wall_seconds + _REPLY_GRACE_SECONDS)
        except Exception as error:
            self._discard(worker)
            if isinstance(error, InfrastructureFailure):
                raise
            raise InfrastructureFailure("sandbox", f"the container broke: {error}") from error
        if "error" in reply:
            self._discard(worker)
            raise InfrastructureFailure("sandbox", f"the sandbox server failed: {reply['error']}")
        if self.pool_size > 0:
            self._release(worker)
        else:
            self._discard(worker)
        return reply_result(reply)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            _close_streams(worker)
        self._finalizer()
        if self._egress is not None:
            self._egress.close()

    def describe(self) -> dict:
        return {
            "backend": "docker",
            "image": self.image,
            **self.policy.describe(),
            "memory_limit": "per_process_and_run",  # RLIMIT_AS and the container's cgroup
        }

    @property
    def container_ids(self) -> frozenset[str]:
        return frozenset(self._owned)


def reply_result(reply: dict, *, text_stdout: bool = True) -> ExecutionResult:
    """The result a container server's reply carries; with `text_stdout` False its stdout is
    left empty (a caller that wants the bytes decodes ``reply["stdout"]`` itself)."""
    return ExecutionResult(
        exit_code=reply["exit_code"],
        stdout=base64.b64decode(reply["stdout"]).decode("utf-8", "replace") if text_stdout else "",
        stderr=base64.b64decode(reply["stderr"]).decode("utf-8", "replace"),
        timed_out=reply["timed_out"],
        output_truncated=reply["output_truncated"],
        wall_seconds=reply["wall_seconds"],
    )


def _close_streams(worker: _Worker) -> None:
    for stream in (worker.handle, worker.stream):
        try:
            stream.close()
        except OSError:
            pass


def _exchange(worker: _Worker, message: bytes, timeout: float) -> dict:
    """Send one request to the server and read its reply from Docker's multiplexed stream."""
    deadline = time.monotonic() + timeout
    worker.stream.settimeout(timeout)
    worker.stream.sendall(message)
    while True:
        reply = _take_reply(worker)
        if reply is not None:
            return reply
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise InfrastructureFailure("sandbox", "the sandbox server did not answer in time")
        worker.stream.settimeout(remaining)
        chunk = worker.stream.recv(1 << 20)
        if not chunk:
            raise InfrastructureFailure("sandbox", "the container stopped during the run")
        worker.partial = _demultiplex(worker.partial + chunk, worker.pending)


async def _aexchange(worker: _Worker, message: bytes, timeout: float) -> dict:
    """:func:`_exchange`, awaited on the running loop: the stream is read when it is ready,
    with no thread waiting on it (the sync form puts the stream back in blocking mode)."""
    loop = asyncio.get_running_loop()
    worker.stream.setblocking(False)

    async def exchange() -> dict:
        await loop.sock_sendall(worker.stream, message)
        while (reply := _take_reply(worker)) is None:
            chunk = await loop.sock_recv(worker.stream, 1 << 20)
            if not chunk:
                raise InfrastructureFailure("sandbox", "the container stopped during the run")
            worker.partial = _demultiplex(worker.partial + chunk, worker.pending)
        return reply

    try:
        return await asyncio.wait_for(exchange(), timeout)
    except asyncio.TimeoutError as error:
        raise InfrastructureFailure(
            "sandbox", "the sandbox server did not answer in time"
        ) from error


def _demultiplex(raw: bytes, stdout: bytearray) -> bytes:
    """Move complete stdout frames of Docker's stream into `stdout`; return what is left."""
    while len(raw) >= 8:
        stream, size = struct.unpack(">BxxxL", raw[:8])
        if len(raw) < 8 + size:
            break
        if stream == 1:  # the server's stderr (frame 2) carries nothing the host needs
            stdout.extend(raw[8 : 8 + size])
        raw = raw[8 + size :]
    return raw


def _take_reply(worker: _Worker) -> dict | None:
    pending = worker.pending
    if len(pending) < 10:
        return None
    size = int(pending[:10])
    if len(pending) < 10 + size:
        return None
    body = bytes(pending[10 : 10 + size])
    del pending[: 10 + size]
    return json.loads(body)
