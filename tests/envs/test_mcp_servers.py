"""rllm/MCP-v0 driving third-party MCP servers installed from PyPI (the ``dev`` extra), over
stdio, the way users point it at servers they did not write."""

from __future__ import annotations

import functools
import http.server
import json
import subprocess

import pytest

from tests.loopback import serve_http
from tests.parts import require_module, require_part

require_module("mcp", "rllm/MCP-v0 needs the mcp extra")

from rllm_envs.mcp import MCPEnv  # noqa: E402

from tests.mcp.helpers import VENV_BIN  # noqa: E402

pytestmark = pytest.mark.slow


def server_command(name: str) -> str:
    path = VENV_BIN / name
    require_part(path.exists(), f"{name} is not installed (pip install '.[dev]')")
    return str(path)


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def tool_names(info: dict) -> set[str]:
    return {tool["function"]["name"] for tool in info["tools"]}


def test_mcp_server_time_converts_between_time_zones():
    env = MCPEnv(
        {"time": server_command("mcp-server-time")},
        [{"question": "What time is 12:00 in London in Tokyo (HH:MM)?", "answer": "21:00"}],
    )
    try:
        _, info = env.reset(seed=0)
        assert {"get_current_time", "convert_time"} <= tool_names(info)
        # Wintertime: London is UTC+0, Tokyo UTC+9 on any day of November.
        observation, *_, info = env.step(
            call(
                "convert_time",
                source_timezone="Europe/London",
                time="12:00",
                target_timezone="Asia/Tokyo",
            )
        )
        assert info["tool_errors"] == 0 and '"datetime"' in observation
        assert "T21:00:00+09:00" in observation or "T20:00:00+09:00" in observation
        observation, *_, info = env.step(
            call(
                "convert_time", source_timezone="Mars/Olympus", time="12:00", target_timezone="UTC"
            )
        )
        assert info["tool_errors"] == 1 and 'status="error"' in observation
        _, reward, terminated, _, _ = env.step("<answer>21:00</answer>")
        assert terminated and reward == 1.0
    finally:
        env.close()


def test_mcp_server_git_reads_a_real_repository(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "notes.txt").write_text("first line\n")
    git = ["git", "-C", str(repo), "-c", "user.name=Ada", "-c", "user.email=ada@example.com"]
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "Add the notes"], check=True)
    (repo / "notes.txt").write_text("first line\nsecond line\n")
    env = MCPEnv(
        {"git": {"command": server_command("mcp-server-git"), "args": ["--repository", str(repo)]}},
        [{"question": "Who made the last commit?", "answer": "Ada"}],
    )
    try:
        _, info = env.reset(seed=0)
        assert {"git_log", "git_status", "git_diff_unstaged"} <= tool_names(info)
        observation, *_ = env.step(
            call("git_log", repo_path=str(repo), max_count=1)
            + call("git_diff_unstaged", repo_path=str(repo))
        )
        assert "Add the notes" in observation and "Ada" in observation
        assert "+second line" in observation
        observation, *_, info = env.step(call("git_log"))  # repo_path is required
        assert info["action_valid"] is False and "'repo_path' is a required property" in observation
    finally:
        env.close()


def page_server(directory):
    handler = functools.partial(
        type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
        directory=str(directory),
    )
    return serve_http(handler)


def test_mcp_server_fetch_reads_a_loopback_page(tmp_path):
    (tmp_path / "page.html").write_text(
        "<html><body><h1>Opening hours</h1><p>The library opens at 9 o'clock.</p></body></html>"
    )
    with page_server(tmp_path) as base:
        env = MCPEnv(
            {
                "fetch": {
                    "command": server_command("mcp-server-fetch"),
                    "args": ["--allow-private-ips", "--ignore-robots-txt"],
                }
            },
            [{"question": "When does the library open?", "answer": "9 o'clock"}],
            reward="f1",
        )
        try:
            env.reset(seed=0)
            observation, *_, info = env.step(call("fetch", url=f"{base}/page.html"))
            assert info["tool_errors"] == 0, observation
            assert "Opening hours" in observation and "opens at 9" in observation
            _, reward, terminated, _, _ = env.step("<answer>at 9 o'clock</answer>")
            assert terminated and reward == pytest.approx(0.8)
        finally:
            env.close()
