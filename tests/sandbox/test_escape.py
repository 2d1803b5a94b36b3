"""The escape suite: every attack is contained on both backends, the sandbox keeps working,
and nothing (process or container) is left behind."""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time

import pytest
from rllm_envs.sandbox import ExecutionRequest

from tests.sandbox.conftest import TEST_POLICY, wait_for_no_sandbox_processes

pytestmark = pytest.mark.slow


def run_python(sandbox, source: str, stdin: bytes = b""):
    files = {"attack.py": textwrap.dedent(source).encode()}
    return sandbox.run(ExecutionRequest(("python3", "attack.py"), files=files, stdin=stdin))


def assert_still_works_and_clean(sandbox) -> None:
    result = run_python(sandbox, "print(sum(range(10)))")
    assert result.ok and result.stdout == "45\n", result
    if os.geteuid() == 0:  # only root can run code as the policy's own uid and so count it
        left = wait_for_no_sandbox_processes(TEST_POLICY.uid)
        assert left == [], [open(f"/proc/{pid}/cmdline").read() for pid in left]


@pytest.fixture
def loopback_server():
    """A TCP server on the host's loopback that records every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            accepted.append("connection")
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def test_egress_to_host_loopback_is_blocked(sandbox, loopback_server):
    port, accepted = loopback_server
    result = run_python(
        sandbox,
        f"""
        import socket
        for host in ("127.0.0.1", "localhost", "172.17.0.1", "10.0.2.2"):
            try:
                socket.create_connection((host, {port}), timeout=0.5).close()
                print("REACHED", host)
            except OSError as error:
                print("blocked", host, type(error).__name__)
        """,
    )
    assert "REACHED" not in result.stdout, result
    assert result.stdout.count("blocked") == 4
    assert accepted == []
    assert_still_works_and_clean(sandbox)


def test_host_filesystem_is_read_only_and_hidden(sandbox, tmp_path):
    target = tmp_path / "planted.txt"
    result = run_python(
        sandbox,
        f"""
        import os
        outcomes = []
        for path in ({str(target)!r}, "/usr/planted.txt", "/etc/planted.txt", "/planted.txt",
                     "/root/planted.txt", {os.getcwd() + "/planted.txt"!r}):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as handle:
                    handle.write("pwned")
                outcomes.append("wrote " + path)
            except OSError as error:
                outcomes.append("refused " + path)
        print("\\n".join(outcomes))
        for path in ("/dev/planted", "/proc/planted", "/tmp/../planted"):
            try:
                open(path, "w").write("pwned")
                print("wrote", path)
            except OSError:
                pass
        open("/scratch/ok.txt", "w").write("scratch is writable")
        print(open("/scratch/ok.txt").read())
        """,
    )
    assert "scratch is writable" in result.stdout, result
    assert "wrote /dev" not in result.stdout and "wrote /proc" not in result.stdout
    for host_path in (target, "/usr/planted.txt", "/etc/planted.txt", "/planted.txt"):
        assert not os.path.exists(host_path), host_path
    assert not os.path.exists(os.path.join(os.getcwd(), "planted.txt"))
    for refused in ("/usr", "/etc", "", "/root", os.getcwd()):
        if refused.startswith("/tmp/"):
            continue  # inside the sandbox /tmp is its own scratch: writable, and not the host's
        assert f"refused {refused}/planted.txt" in result.stdout, result.stdout
    assert_still_works_and_clean(sandbox)


def test_host_secret_cannot_be_read(sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-7f3a")
    secret.chmod(0o644)
    result = run_python(
        sandbox,
        f"""
        import os
        for path in ({str(secret)!r}, "/etc/shadow", "/root/.bash_history",
                     "/proc/1/environ", {os.path.abspath("pyproject.toml")!r}):
            try:
                print(path, open(path, errors="replace").read()[:200])
            except OSError as error:
                print("refused", path, type(error).__name__)
        """,
    )
    assert "TOP-SECRET-7f3a" not in result.stdout + result.stderr
    assert "rllm" not in result.stdout  # the repository is not visible either
    assert result.stdout.count("refused") >= 4, result
    assert_still_works_and_clean(sandbox)


def test_fork_bomb_is_contained(sandbox):
    started = time.monotonic()
    result = run_python(
        sandbox,
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
    )
    assert time.monotonic() - started < TEST_POLICY.wall_seconds + 3
    assert not result.ok
    assert_still_works_and_clean(sandbox)


def test_memory_bomb_is_contained(sandbox):
    result = run_python(
        sandbox,
        """
        hoard = []
        while True:
            hoard.append(bytearray(32 * 1024 * 1024))
        """,
    )
    assert not result.ok
    assert "MemoryError" in result.stderr or result.exit_code < 0, result
    assert_still_works_and_clean(sandbox)


def test_cpu_loop_is_stopped(sandbox):
    started = time.monotonic()
    result = run_python(sandbox, "while True:\n    pass\n")
    assert not result.ok
    assert time.monotonic() - started < TEST_POLICY.wall_seconds + 2
    assert_still_works_and_clean(sandbox)


def test_sleeping_past_the_deadline_times_out(sandbox):
    started = time.monotonic()
    result = run_python(sandbox, "import time\nprint('start', flush=True)\ntime.sleep(60)\n")
    elapsed = time.monotonic() - started
    assert result.timed_out and result.status == "timeout"
    assert result.stdout == "start\n"
    assert TEST_POLICY.wall_seconds - 0.2 < elapsed < TEST_POLICY.wall_seconds + 2
    assert_still_works_and_clean(sandbox)


def test_a_gigabyte_of_stdout_is_cut_at_the_cap(sandbox):
    started = time.monotonic()
    result = run_python(
        sandbox,
        """
        import sys
        block = "x" * (1 << 20)
        for _ in range(1024):
            sys.stdout.write(block)
        """,
    )
    assert result.output_truncated and result.status == "output_limit"
    assert len(result.stdout) + len(result.stderr) <= TEST_POLICY.max_output_bytes
    assert time.monotonic() - started < TEST_POLICY.wall_seconds + 2
    assert_still_works_and_clean(sandbox)


def test_a_daemon_does_not_outlive_its_run(sandbox):
    result = run_python(
        sandbox,
        """
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for fd in (0, 1, 2):
                    os.close(fd)
                time.sleep(120)
            os._exit(0)
        print("parent done")
        """,
    )
    assert result.stdout == "parent done\n", result
    assert_still_works_and_clean(sandbox)


def test_scratch_is_emptied_between_runs(sandbox):
    run_python(sandbox, "open('/scratch/left-behind', 'w').write('x')")
    result = run_python(sandbox, "import os\nprint(sorted(os.listdir('/scratch')))")
    assert "left-behind" not in result.stdout, result


def test_code_runs_unprivileged_without_capabilities(sandbox):
    result = run_python(
        sandbox,
        """
        import os
        status = open("/proc/self/status").read()
        # Held capabilities (the bounding set only limits what exec could ever grant, and
        # no-new-privileges / a fresh user namespace keep exec from granting anything).
        held = ("CapInh:", "CapPrm:", "CapEff:", "CapAmb:")
        caps = [line.split()[1] for line in status.splitlines() if line.startswith(held)]
        print(os.getuid(), os.getgid(), sorted(set(caps)))
        """,
    )
    uid, gid, caps = result.stdout.split(" ", 2)
    assert int(uid) != 0 and int(gid) != 0
    assert caps.strip() == "['0000000000000000']", result.stdout
