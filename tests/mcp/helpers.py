"""Helpers for the MCP tests: server specs for the test servers, child processes, free ports."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
TOY_SERVER = {
    "command": sys.executable,
    "args": ["-m", "tests.mcp.toy_server"],
    "cwd": str(REPO_ROOT),
}
VENV_BIN = Path(sys.executable).parent


def child_pids() -> set[int]:
    """Live child processes of this test process (zombies excluded)."""
    children = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            children.add(int(entry.name))
    return children


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def http_toy_server():
    """The toy server serving Streamable HTTP on a loopback port; yields its MCP URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp.toy_server", "--http", str(port)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def listening() -> bool:
        try:
            httpx.get(url, timeout=0.5)
            return True
        except httpx.HTTPError:
            return False

    try:
        if not wait_until(listening, 30):
            raise RuntimeError("the HTTP toy server did not start")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
