"""Backends by name, the policy, container lifecycle (pool reuse, cleanup on close, on errors,
at exit, and sweeping after a crash) and the Python tool."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import docker
import pytest
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.sandbox import (
    SANDBOX_BACKENDS,
    ExecutionRequest,
    MissingEngineError,
    PythonInterpreter,
    SandboxPolicy,
    bwrap,
    devices,
    make_sandbox,
)

from tests.parts import require_part
from tests.sandbox.conftest import TEST_POLICY, labelled_containers, own_containers, require_backend


def test_backends_are_chosen_by_name_with_clear_errors(monkeypatch):
    assert set(SANDBOX_BACKENDS) == {"bwrap", "docker"}
    with pytest.raises(ValueError, match="choose from \\['bwrap', 'docker'\\]"):
        make_sandbox("firejail")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingEngineError, match="apt-get install bubblewrap"):
        make_sandbox("bwrap")
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(
        "docker.from_env", lambda: docker.DockerClient("unix:///nonexistent/d.sock")
    )
    with pytest.raises(
        MissingEngineError, match="running Docker engine.*apt-get install docker.io"
    ):
        make_sandbox("docker")
    with pytest.raises(MissingEngineError, match="the address given is unix:///nonexistent/"):
        make_sandbox("docker", base_url="unix:///nonexistent/docker.sock")


def test_a_wrong_docker_host_is_named_not_docker_missing(monkeypatch):
    """Docker installed and running, DOCKER_HOST pointing elsewhere: the error names the
    address to fix rather than asking to install Docker."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(MissingEngineError) as error:
        make_sandbox("docker")
    message = str(error.value)
    assert "DOCKER_HOST is unix:///nonexistent/docker.sock" in message, message
    assert "apt-get install" not in message


def test_policy_validates_and_describes_itself():
    with pytest.raises(ValueError, match="memory_mb must be positive"):
        SandboxPolicy(memory_mb=0)
    with pytest.raises(ValueError, match="must not be root"):
        SandboxPolicy(uid=0)
    described = SandboxPolicy(cpu_seconds=3).describe()
    assert described["cpu_seconds"] == 3 and described["network"] is False
    assert described["filesystem"] == "read-only, writable /scratch"


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_limits_are_the_policys(backend):
    require_backend(backend)
    box = make_sandbox(backend, TEST_POLICY)
    try:
        probe = textwrap.dedent(
            """
            import os, resource
            def limit(name):
                return resource.getrlimit(getattr(resource, name))[0]
            scratch = os.statvfs("/scratch")
            print(limit("RLIMIT_CPU"), limit("RLIMIT_AS") >> 20, limit("RLIMIT_FSIZE") >> 20,
                  scratch.f_blocks * scratch.f_frsize >> 20)
            try:
                open("/scratch/big", "wb").write(b"x" * (9 << 20))
            except OSError as error:
                print("file cap", type(error).__name__)
            """
        )
        result = box.run(ExecutionRequest(("python3", "-c", probe)))
        cpu, memory, file_mb, scratch_mb = result.stdout.split()[:4]
        assert (int(cpu), int(memory), int(file_mb), int(scratch_mb)) == (1, 256, 8, 16)
        assert "file cap" in result.stdout or result.exit_code != 0
    finally:
        box.close()


DEVICE_PROBE = """
import os
open("/dev/null", "w").write("discarded")
print(len(open("/dev/urandom", "rb").read(16)), open("/dev/zero", "rb").read(2))
for path in ("/dev/planted", "/dev/null"):
    try:
        open(path + ".new", "w")
        print("created", path)
    except OSError:
        pass
"""


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_device_nodes_work_and_dev_takes_no_new_files(backend):
    require_backend(backend)
    box = make_sandbox(backend, TEST_POLICY)
    try:
        result = box.run(ExecutionRequest(("python3", "-c", DEVICE_PROBE)))
        assert result.ok and result.stdout == "16 b'\\x00\\x00'\n", result
    finally:
        box.close()


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_a_program_that_cannot_be_started_exits_127(backend):
    require_backend(backend)
    box = make_sandbox(backend, TEST_POLICY)
    try:
        result = box.run(ExecutionRequest(("no-such-program", "--flag")))
        assert result.exit_code == 127 and "no-such-program" in result.stderr, result
        assert box.run(ExecutionRequest(("python3", "-c", "print(5)"))).stdout == "5\n"
    finally:
        box.close()


def kernel_reports_exit_status() -> bool:
    """Whether this kernel tells a pidfd's holder how a reaped process ended (Linux >= 6.15):
    what lets the bwrap backend tell a killed program from one exiting 128 + n itself."""
    child = subprocess.Popen(["true"])
    pidfd = os.pidfd_open(child.pid)
    try:
        child.wait()
        return bwrap.reaped_wait_status(pidfd) == 0
    finally:
        os.close(pidfd)


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_a_run_ended_by_a_signal_reports_minus_the_signal_on_both_backends(backend):
    require_backend(backend)
    # Room for a second of CPU time on a loaded machine: the CPU limit must end the loop.
    box = make_sandbox(backend, TEST_POLICY.with_limits(wall_seconds=10))
    try:
        segfault = box.run(
            ExecutionRequest(("python3", "-c", "import ctypes; ctypes.string_at(0)"))
        )
        assert segfault.exit_code == -signal.SIGSEGV and segfault.status == "killed", segfault
        spinning = box.run(ExecutionRequest(("python3", "-c", "while True: pass")))
        assert spinning.exit_code == -signal.SIGKILL and not spinning.timed_out, spinning
        assert spinning.status == "killed"
        flooding = box.run(ExecutionRequest(("python3", "-c", "while True: print('x' * 999)")))
        assert flooding.exit_code == -signal.SIGKILL and flooding.output_truncated, flooding
        # The number a shell would give a killed program, exited with on purpose: not a kill.
        own = box.run(ExecutionRequest(("python3", "-c", "import sys; sys.exit(137)")))
        if backend == "docker" or kernel_reports_exit_status():
            assert own.exit_code == 137 and own.status == "exit 137", own
        else:  # bubblewrap's 128 + n is all an older kernel leaves (see rllm_envs.sandbox.bwrap)
            assert own.exit_code == -signal.SIGKILL, own
    finally:
        box.close()


def test_bwrap_reads_the_kernels_wait_status_over_bubblewraps_number():
    exited_137, killed = 137 << 8, signal.SIGKILL  # wait statuses
    assert bwrap.program_exit_code(137, exited_137) == 137
    assert bwrap.program_exit_code(137, killed) == -signal.SIGKILL
    # Without the kernel's word (Linux < 6.15): 128 + n reads as signal n, the rest as is.
    assert bwrap.program_exit_code(137, None) == -signal.SIGKILL
    assert bwrap.program_exit_code(139, None) == -signal.SIGSEGV
    assert [bwrap.program_exit_code(code, None) for code in (0, 1, 127, 128, 255)] == [
        0, 1, 127, 128, 255
    ]  # fmt: skip


def test_bwrap_devices_are_bound_one_by_one_where_no_device_folder_can_be_made(monkeypatch):
    require_backend("bwrap")
    monkeypatch.setattr(devices, "make_folder", lambda: None)  # as for a non-root host
    box = make_sandbox("bwrap", TEST_POLICY)
    try:
        result = box.run(ExecutionRequest(("python3", "-c", DEVICE_PROBE), stdin=b"x"))
        assert result.ok and result.stdout == "16 b'\\x00\\x00'\n", result
        reopened = "print(open('/dev/stdin').read(), file=open('/dev/stdout', 'w'))"
        assert box.run(ExecutionRequest(("python3", "-c", reopened), stdin=b"x")).stdout == "x\n"
    finally:
        box.close()


def test_bwrap_device_folder_is_removed_at_close():
    require_backend("bwrap")
    box = make_sandbox("bwrap", TEST_POLICY)
    folder = box.device_folder
    box.close()
    assert folder is None or not os.path.exists(folder)


DEVICE_FOLDER_OWNER = """
from rllm_envs.sandbox import ExecutionRequest, make_sandbox
box = make_sandbox("bwrap")
box.run(ExecutionRequest(("true",)))
print(box.device_folder, flush=True)
import time
time.sleep(60)
"""


def test_bwrap_device_folder_of_a_killed_owner_is_swept():
    require_backend("bwrap")
    require_part(os.geteuid() == 0, "only root makes device folders (CI runs as root)")
    owner = subprocess.Popen(
        [sys.executable, "-c", DEVICE_FOLDER_OWNER], stdout=subprocess.PIPE, text=True
    )
    folder = owner.stdout.readline().strip()
    owner.kill()  # no chance to clean up
    owner.wait()
    owner.stdout.close()
    assert os.path.isdir(folder)
    box = make_sandbox("bwrap", TEST_POLICY)
    try:
        assert box.run(ExecutionRequest(("python3", "-c", "print(6)"))).stdout == "6\n"
    finally:
        box.close()
    assert not os.path.exists(folder)


def test_stdin_is_streamed_to_the_program_in_full():
    require_backend("bwrap")
    box = make_sandbox("bwrap", TEST_POLICY)
    data = bytes(range(256)) * 2000  # 512 KB, binary: several pipe buffers
    code = "import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
    try:
        result = box.run(ExecutionRequest(("python3", "-c", code), stdin=data))
        assert result.stdout.strip() == hashlib.sha256(data).hexdigest()
        # A program that never reads its input, or reads a little and exits, is not held up.
        for code in ("print('ignored')", "import sys; sys.stdin.read(10); print('ignored')"):
            result = box.run(ExecutionRequest(("python3", "-c", code), stdin=data * 8))
            assert result.ok and result.stdout == "ignored\n", result
            assert result.wall_seconds < TEST_POLICY.wall_seconds - 0.5
    finally:
        box.close()


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_programs_can_reopen_their_standard_streams(backend):
    require_backend(backend)
    box = (
        make_sandbox(backend, TEST_POLICY, pool_size=0)
        if backend == "docker"
        else make_sandbox(backend, TEST_POLICY)
    )
    try:
        code = "print(open('/dev/stdin').read().upper(), file=open('/dev/stdout', 'w'))"
        result = box.run(ExecutionRequest(("python3", "-c", code), stdin=b"abc"))
        assert result.stdout == "ABC\n", result
    finally:
        box.close()


def test_bwrap_launcher_is_replaced_when_gone_and_ends_with_the_sandbox():
    require_backend("bwrap")
    box = make_sandbox("bwrap", TEST_POLICY)
    try:
        assert box.run(ExecutionRequest(("python3", "-c", "print(1)"))).stdout == "1\n"
        first = box.launcher_pid
        os.kill(first, signal.SIGKILL)
        time.sleep(0.2)  # it is gone (a zombie until the next run notices)
        assert box.run(ExecutionRequest(("python3", "-c", "print(2)"))).stdout == "2\n"
        second = box.launcher_pid
        assert second not in (None, first)
    finally:
        box.close()
    assert box.launcher_pid is None
    assert not os.path.exists(f"/proc/{second}")  # stopped and reaped, not left running


def test_input_files_over_the_file_size_limit_are_refused():
    require_backend("bwrap")
    box = make_sandbox("bwrap", TEST_POLICY)
    big = b"x" * ((TEST_POLICY.max_file_mb << 20) + 1)
    try:
        with pytest.raises(ValueError, match="larger than the policy's max_file_mb"):
            box.run(ExecutionRequest(("python3", "big.bin"), files={"big.bin": big}))
    finally:
        box.close()


def test_python_tool_runs_code_and_reports_errors():
    tool = PythonInterpreter.on_backend("bwrap", TEST_POLICY)
    try:
        assert tool.schema["function"]["name"] == "python"
        assert tool(code="print(sum(range(5)))") == "10\n"
        assert tool(code="print(input()[::-1])", stdin="abc") == "cba\n"
        failure = tool(code="raise ValueError('nope')")
        assert "ValueError: nope" in failure and "[exit 1]" in failure
        assert tool(code="import time; time.sleep(9)").endswith("[timeout]")
        assert tool(code="").startswith("[error]")
    finally:
        tool.close()


# -- Docker container lifecycle ------------------------------------------------------------------
@pytest.fixture
def docker_required():
    require_backend("docker")


def test_warm_pool_reuses_containers_and_close_removes_them(docker_required):
    box = make_sandbox("docker", TEST_POLICY, pool_size=1)
    try:
        for _ in range(4):
            assert box.run(ExecutionRequest(("python3", "-c", "print(1)"))).stdout == "1\n"
        created = set(box.container_ids)
        assert 1 <= len(created) <= 2  # one pooled; a second only while the first resets
        assert created <= set(own_containers())
    finally:
        box.close()
    assert own_containers() == []
    box.close()  # idempotent


def test_cold_mode_leaves_no_container(docker_required):
    box = make_sandbox("docker", TEST_POLICY, pool_size=0)
    try:
        assert box.run(ExecutionRequest(("python3", "-c", "print(2)"))).stdout == "2\n"
        assert own_containers() == []
    finally:
        box.close()


def test_a_container_that_dies_is_replaced_or_reported_as_infrastructure(docker_required):
    import threading

    import docker

    client = docker.from_env()
    box = make_sandbox("docker", TEST_POLICY, pool_size=1)
    try:
        box.run(ExecutionRequest(("python3", "-c", "pass")))
        # Died while idle in the pool: the next run quietly gets a fresh container.
        for container_id in box.container_ids:
            client.api.kill(container_id)
            client.api.wait(container_id)
        assert box.run(ExecutionRequest(("python3", "-c", "print(3)"))).stdout == "3\n"
        # Died during a run: not the code's fault, so an infrastructure failure.
        running = threading.Timer(0.5, lambda: [client.api.kill(cid) for cid in box.container_ids])
        running.start()
        with pytest.raises(InfrastructureFailure) as failure:
            box.run(ExecutionRequest(("python3", "-c", "import time; time.sleep(2)")))
        running.join()
        assert failure.value.kind == "sandbox"
        assert box.run(ExecutionRequest(("python3", "-c", "print(4)"))).stdout == "4\n"
    finally:
        box.close()
        client.close()
    assert own_containers() == []


CRASHING_OWNER = """
import os
from rllm_envs.sandbox import ExecutionRequest, make_sandbox
box = make_sandbox("docker", pool_size=2)
box.run(ExecutionRequest(("python3", "-c", "pass")))
print(len(box.container_ids), os.getpid(), flush=True)
{ending}
"""


@pytest.mark.slow
def test_containers_are_removed_at_exit_and_swept_after_a_crash(docker_required):
    def run_owner(ending: str) -> list[str]:
        """The owner's containers left once it ended (other processes' come and go)."""
        done = subprocess.run(
            [sys.executable, "-c", CRASHING_OWNER.format(ending=ending)],
            capture_output=True,
            text=True,
        )
        count, pid = done.stdout.split()
        assert count == "1", done.stderr
        return labelled_containers(owner_pid=int(pid))

    # A clean interpreter exit without close(): the finaliser removes the containers.
    assert run_owner(ending="") == []
    # A hard crash (no finaliser runs) leaks them until the next sandbox sweeps.
    leaked = run_owner(ending="os._exit(1)")
    assert len(leaked) == 1
    make_sandbox("docker", TEST_POLICY).close()  # constructing a sandbox sweeps orphans
    assert set(labelled_containers()) & set(leaked) == set()
