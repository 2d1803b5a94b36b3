"""A real MCP server for the env tests, run as ``python -m tests.mcp.toy_server [--http PORT]``.

Its tools cover what the tests need from a server: a plain result, typed arguments the
schema checks, a tool error, a slow call (hang) and a crash of the whole process.
"""

from __future__ import annotations

import argparse
import os
import time

from mcp.server.mcpserver import MCPServer
from rllm_envs.mcp.servers import serve

server = MCPServer("toy")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def fail(message: str) -> str:
    """Raise an error with the message (a tool error, not a crash)."""
    raise ValueError(message)


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep for the given seconds, then say so (a hung server when long)."""
    time.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def crash() -> str:
    """Kill the server process at once, as a segfault would."""
    os._exit(3)


@server.tool()
def pid() -> int:
    """The server's process id (tests check reuse and restarts)."""
    return os.getpid()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, default=None, help="serve Streamable HTTP on this port")
    serve(server, parser.parse_args().http)


if __name__ == "__main__":
    main()
