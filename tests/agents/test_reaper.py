"""The watchdog behind every CLI's own clusters (rllm_agents.reaper): once its owner is gone,
SIGKILL included, what the owner told it about is killed and its scratch folders removed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rllm_agents import reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

OWNER = """
import os, subprocess, sys, time
from rllm_agents import reaper
folder = sys.argv[1]
os.makedirs(os.path.join(folder, "session"))
# Its own session: a kill of the owner's group would not reach it (as Ray's agents).
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
watchdog = reaper.watch(os.getpid())
watchdog.remove_folder(folder)
print(child.pid, flush=True)
time.sleep(300)
"""


def wait_until(condition, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_an_owner_killed_leaves_no_process_and_no_folder(tmp_path, sig):
    folder = tmp_path / "rllm-ray-x"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(owner.stdout.readline())
        assert reaper.running(child) and (folder / "session").is_dir()
        owner.send_signal(sig)
        owner.wait(timeout=30)
        assert wait_until(lambda: not reaper.running(child)), "the child outlived its owner"
        assert wait_until(lambda: not folder.exists()), "the scratch folder was left"
    finally:
        owner.kill()
        owner.wait()


def test_a_released_watch_ends_what_it_watched_and_the_owner_goes_on(tmp_path):
    folder = tmp_path / "scratch"
    folder.mkdir()
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        watchdog = reaper.start_watchdog()
        watchdog.add([(child.pid, start_time(child.pid))])
        watchdog.remove_folder(str(folder))
        watchdog.release()
        assert wait_until(lambda: child.poll() is not None), "the watched process still runs"
        assert not folder.exists()
    finally:
        child.kill()
        child.wait()


def start_time(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[19]
