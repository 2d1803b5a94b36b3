"""Sandboxes of both backends for the tests, under a tight policy so attacks end fast."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from rllm_envs.sandbox import SandboxPolicy, make_sandbox
from rllm_envs.sandbox.policy import SANDBOX_UID
from rllm_envs.sandbox.process import LAUNCHER_MARK

from tests.parts import require_part

# Tight enough that bombs and loops end within a couple of seconds on a shared 2-core machine.
# A uid of its own: the escape suite counts every process of its uid on the host, and the env
# tests on another xdist worker run code as the default one meanwhile.
TEST_POLICY = SandboxPolicy(
    uid=SANDBOX_UID - 1,
    cpu_seconds=1,
    wall_seconds=2.5,
    memory_mb=256,
    max_processes=32,
    max_output_bytes=64 * 1024,
    scratch_mb=16,
    max_file_mb=8,
)


def docker_ready() -> tuple[bool, str]:
    try:
        import docker

        client = docker.from_env()
        client.ping()
        client.images.get(os.environ.get("RLLM_SANDBOX_IMAGE", "rllm-sandbox:1"))
        client.close()
    except Exception as error:  # no SDK, no engine, or no image
        return False, f"Docker engine with the sandbox image needed ({error})"
    return True, ""


def require_backend(name: str) -> None:
    if name == "bwrap":
        require_part(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
        require_part(os.path.exists("/usr/bin/python3"), "system python3 for the bwrap sandbox")
    else:
        ready, reason = docker_ready()
        require_part(ready, reason)


def _is_own_launcher(entry: Path, status: str) -> bool:
    """The bwrap backend's launcher: a child of this test process, marked on its command line
    (it has the sandbox's uid to start bubblewrap with, and runs no code of its own)."""
    parent = next(line for line in status.splitlines() if line.startswith("PPid:"))
    if int(parent.split()[1]) != os.getpid():
        return False
    try:
        return LAUNCHER_MARK.encode() in (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def sandbox_processes(uid: int) -> list[int]:
    """Host pids whose real uid is the sandbox's (both backends' code runs as that uid), not
    counting this process's bwrap launchers."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # exited while we looked
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        if int(uid_line.split()[1]) != uid:
            continue
        if not _is_own_launcher(entry, status):
            pids.append(int(entry.name))
    return pids


def wait_for_no_sandbox_processes(uid: int, timeout: float = 5.0) -> list[int]:
    """Docker resets containers in the background, so give the reset a moment."""
    deadline = time.monotonic() + timeout
    while (left := sandbox_processes(uid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def labelled_containers(owner_pid: int | None = None) -> list[str]:
    """Sandbox containers on this engine; with `owner_pid`, only that process's."""
    import docker

    label = "rllm.sandbox=1"
    if owner_pid is not None:
        label = f"rllm.sandbox.owner={os.uname().nodename}:{owner_pid}"
    client = docker.from_env()
    try:
        found = client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
        return [container.id for container in found]
    finally:
        client.close()


def own_containers() -> list[str]:
    """Sandbox containers this test process owns (by the owner label)."""
    import docker

    client = docker.from_env()
    owner = f"rllm.sandbox.owner={os.uname().nodename}:{os.getpid()}"
    try:
        return [
            container.id for container in client.containers.list(all=True, filters={"label": owner})
        ]
    finally:
        client.close()


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def sandbox(request):
    require_backend(request.param)
    box = make_sandbox(request.param, TEST_POLICY)
    yield box
    box.close()
    if request.param == "docker":  # every attack done: not one container may be left
        assert own_containers() == []
