"""No child outlives a CLI: SIGTERM or SIGKILL of ``rllm-eval --llamacpp`` (its llama.cpp
server) or of ``rllm-train --executor ray`` (its local Ray cluster) leaves no process behind.

Children are found through /proc (Linux) while the command runs, before it is killed: once
it is gone they are re-parented and no longer look like its children.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rllm_agents import reaper

from tests.parts import require_module, require_part

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]
REPO = Path(__file__).resolve().parents[1]


def descendants(root: int) -> set[int]:
    return {pid for pid, _ in reaper.descendants(root)}


def command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def run_and_kill(command: list[str], marker: str, sig: signal.Signals, ready: Path) -> None:
    """Start `command`, wait for a descendant whose command line holds `marker` and for the
    file `ready` (the run is under way), send `sig`, and check every descendant seen ends
    within 30 s."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 180
        while not (
            ready.exists() and any(marker in command_line(pid) for pid in descendants(process.pid))
        ):
            assert process.poll() is None, process.stderr.read()[-3000:]
            assert time.monotonic() < deadline, f"no {marker} child within 180 s"
            time.sleep(0.2)
        children = descendants(process.pid)
        assert process.poll() is None, process.stderr.read()[-3000:]
        process.send_signal(sig)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if sig == signal.SIGTERM:
        stderr = process.stderr.read()
        assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
        # Said as Ctrl-C is: what stopped it, and how to go on.
        assert stderr.rstrip().endswith("terminated by SIGTERM; continue with --resume"), stderr
    deadline = time.monotonic() + 30
    while any(reaper.running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: command_line(pid) for pid in children if reaper.running(pid)}
    for pid in left:  # do not leak them into the rest of the test session
        os.kill(pid, signal.SIGKILL)
    assert not left, f"children left after {sig.name}: {left}"


@pytest.mark.llamacpp
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_rllm_eval_leaves_no_llamacpp_server(tmp_path, sig):
    from rllm_agents.engines.llamacpp.server import llamacpp_available

    require_part(llamacpp_available(), "llama-cpp-python's server is not installed")
    command = [sys.executable, "-m", "rllm_agents.cli.eval", "--env", "rllm/FrozenLake-v0"]
    command += ["--llamacpp", "--num-tasks", "50", "--max-turns", "8", "--parallel", "2"]
    command += ["--no-progress", "--output", str(tmp_path / "run")]
    run_and_kill(command, "llama_cpp.server", sig, ready=tmp_path / "run" / ".lock")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_rllm_train_leaves_no_ray_process(tmp_path, tiny_model, sig):
    require_module("ray", "Ray is not installed (pip install 'rllm-agents[ray]')")
    command = [sys.executable, "-m", "rllm_train.cli", "--executor", "ray", "--model", tiny_model]
    command += ["--steps", "50", "--no-progress", "--output", str(tmp_path / "run")]
    command += ["rollout.tasks_per_step=2", "rollout.n=2", "rollout.max_response_tokens=4"]
    command += ["rollout.dispatch=async"]
    run_and_kill(command, "raylet", sig, ready=tmp_path / "run" / "metrics.jsonl")


@pytest.fixture(scope="module")
def tiny_model() -> str:
    from rllm_agents.models import resolve_model

    return str(resolve_model("tiny"))
