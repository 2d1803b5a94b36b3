"""Running a program's command: its input and output, and nothing of it left running after the
run - whether it exits, runs past its time limit or its caller is cancelled."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
from rllm_agents.programs.process import STDERR_LIMIT, run_command
from rllm_agents.reaper import running

# A program that starts a background process in its group, writes that process's pid to the
# file given as its first argument, then does what its second argument says.
FORKING_PROGRAM = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[1], "w").write(str(child.pid))
print("started", flush=True)
print("working...", file=sys.stderr, flush=True)
if sys.argv[2] == "hang":
    time.sleep(300)
"""


def forking(tmp_path, then: str) -> tuple[list[str], object]:
    pid_file = tmp_path / "child.pid"
    return [sys.executable, "-c", FORKING_PROGRAM, str(pid_file), then], pid_file


def assert_gone(pid: int) -> None:
    deadline = time.monotonic() + 5
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid), f"process {pid} outlived the program run"


async def test_task_in_result_out():
    script = (
        "import json, sys; task = json.load(sys.stdin); print(json.dumps({'reward': task['x']}))"
    )
    done = await run_command([sys.executable, "-c", script], stdin='{"x": 2}\n', env=os.environ)
    assert done.returncode == 0 and done.stdout.strip() == '{"reward": 2}'
    assert not done.timed_out and done.seconds > 0


async def test_what_a_finished_program_left_running_is_killed(tmp_path):
    argv, pid_file = forking(tmp_path, "exit")
    done = await run_command(argv, stdin="", env=os.environ, timeout_s=30)
    # The background process still held stdout; the run did not wait for it.
    assert done.returncode == 0 and done.seconds < 20
    assert done.stdout == "started\n" and done.stderr == "working...\n"
    assert_gone(int(pid_file.read_text()))


# A program whose background process leaves its process group: by setsid, or by a daemon's
# double fork (the grandchild re-parents to init). It writes that process's pid to argv[1].
ESCAPING_PROGRAM = """
import os, subprocess, sys, time
if sys.argv[2] == "setsid":
    pid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                           start_new_session=True).pid
else:
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write_end, str(os.getpid()).encode())
            time.sleep(300)
        os._exit(0)
    os.close(write_end)
    pid = int(os.read(read_end, 32))
open(sys.argv[1], "w").write(str(pid))
"""


@pytest.mark.parametrize("how", ["setsid", "double-fork"])
async def test_a_process_that_left_the_group_is_killed_too(tmp_path, how):
    pid_file = tmp_path / "escaped.pid"
    argv = [sys.executable, "-c", ESCAPING_PROGRAM, str(pid_file), how]
    done = await run_command(argv, stdin="", env=os.environ, timeout_s=30, grace_s=5)
    assert done.returncode == 0, done.stderr
    assert done.seconds < 5  # not held up by the escaped process's copy of stdout
    assert_gone(int(pid_file.read_text()))


async def test_the_time_limit_kills_the_whole_group(tmp_path):
    argv, pid_file = forking(tmp_path, "hang")
    done = await run_command(argv, stdin="", env=os.environ, timeout_s=1.5, grace_s=0.5)
    assert done.timed_out and done.returncode is None
    assert done.stderr == "working...\n"  # what it wrote before it was killed is kept
    assert 1.5 <= done.seconds < 10
    assert_gone(int(pid_file.read_text()))


async def test_a_program_that_ignores_sigterm_is_killed_after_the_grace_period():
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    done = await run_command(
        [sys.executable, "-c", script], stdin="", env=os.environ, timeout_s=1, grace_s=0.5
    )
    assert done.timed_out and done.seconds < 10


async def test_cancelling_the_run_kills_the_group(tmp_path):
    argv, pid_file = forking(tmp_path, "hang")
    run = asyncio.ensure_future(run_command(argv, stdin="", env=os.environ))
    while not pid_file.exists() or not pid_file.read_text():
        await asyncio.sleep(0.05)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert_gone(int(pid_file.read_text()))


async def test_only_the_end_of_a_long_stderr_is_kept():
    script = "import sys; sys.stderr.write('x' * 300000 + 'the end')"
    done = await run_command([sys.executable, "-c", script], stdin="", env=os.environ)
    assert done.stderr.endswith("the end") and len(done.stderr) == STDERR_LIMIT


async def test_a_program_that_never_reads_its_input_is_fine():
    done = await run_command(
        [sys.executable, "-c", "print(1)"], stdin="x" * 1_000_000, env=os.environ
    )
    assert done.returncode == 0 and done.stdout == "1\n"
