"""`ServerConnection`: one live MCP client session to one server, with one restart on failure.

A connection lives on the manager's event loop. The MCP client is an async context manager
that must be entered and left in the same task, so a *holder* task opens it, keeps it open
until told to stop, and closes it (which ends a stdio server process).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from rllm_envs.mcp.servers import ServerSpec

# How much of a server's stderr an error message quotes.
STDERR_TAIL_CHARS = 1500


class ServerUnavailable(RuntimeError):
    """The server could not be reached, crashed or hung, even after one restart."""


@dataclass(frozen=True)
class ToolResult:
    """A tool call's outcome as the env shows it (text), plus whether the tool reported an error."""

    text: str
    is_error: bool
    structured: Any = None


def result_text(result: Any) -> str:
    """The text of a `CallToolResult`: its text parts, else its structured content as JSON."""
    import json

    parts = []
    for item in result.content or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind == "resource" and hasattr(item.resource, "text"):
            parts.append(item.resource.text)
        else:  # images, audio, links: say what came back rather than dump bytes
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, sort_keys=True))
    return "\n".join(parts)


def _function_server(spec: ServerSpec) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(spec.name)
    for function in spec.functions:
        server.add_tool(function)
    return server


def _client(spec: ServerSpec, errlog: Any) -> Any:
    """The (not yet entered) MCP client for a spec, keyed by transport."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    def stdio() -> Any:
        parameters = StdioServerParameters(
            command=spec.command,
            args=list(spec.args),
            # The child inherits our environment (PATH, venv) plus the spec's own variables.
            env={**os.environ, **dict(spec.env)},
            cwd=spec.cwd,
        )
        return Client(stdio_client(parameters, errlog=errlog))

    builders: dict[str, Callable[[], Any]] = {
        "stdio": stdio,
        "http": lambda: Client(streamable_http_client(spec.url)),
        "python": lambda: Client(_function_server(spec)),
    }
    return builders[spec.transport]()


class ServerConnection:
    """A session to one server. Every coroutine here runs on the manager's loop."""

    def __init__(self, spec: ServerSpec, *, connect_timeout: float) -> None:
        self.spec = spec
        self.connect_timeout = connect_timeout
        self.tools: list[dict[str, Any]] = []
        self.generation = 0  # bumped on every (re)start, so concurrent failures restart once
        self.restarts = 0
        self._client: Any = None
        self._holder: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        self._restart_lock = asyncio.Lock()
        # stderr of a stdio server goes to a file: quiet tests, and its tail explains crashes.
        self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._holder = asyncio.create_task(self._hold(ready, self._stop))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
            listing = await asyncio.wait_for(self._client.list_tools(), self.connect_timeout)
        except BaseException as error:
            await self.stop()
            raise ServerUnavailable(
                f"MCP server {self.spec.name!r} did not start: {_describe(error)}{self.stderr_tail()}"
            ) from error
        self.tools = [tool.model_dump(mode="json", exclude_none=True) for tool in listing.tools]
        self.generation += 1

    async def _hold(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        try:
            async with _client(self.spec, self._errlog) as client:
                self._client = client
                if not ready.done():
                    ready.set_result(None)
                await stop.wait()
        except BaseException as error:  # noqa: BLE001 - reported through `ready` or the next call
            if not ready.done():
                ready.set_exception(error)
        finally:
            self._client = None

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        holder, self._holder = self._holder, None
        if holder is not None and not holder.done():
            try:
                # Leaving the client ends a stdio server (stdin closed, then terminate/kill).
                await asyncio.wait_for(asyncio.shield(holder), self.connect_timeout)
            except (asyncio.TimeoutError, Exception):
                holder.cancel()
                await asyncio.gather(holder, return_exceptions=True)

    async def close(self) -> None:
        await self.stop()
        self._errlog.close()

    async def _restart(self, failed_generation: int) -> None:
        async with self._restart_lock:
            if self.generation != failed_generation:
                return  # another caller already restarted it after the same failure
            self.restarts += 1
            await self.stop()
            await self.start()

    # -- calls -----------------------------------------------------------------------------
    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        """Call a tool; a crashed or hung server is restarted and the call retried once."""
        last_error: BaseException | None = None
        for attempt in range(2):
            generation = self.generation
            try:
                if self._client is None:
                    raise ServerUnavailable("not connected")
                # anyio's deadline scope costs no extra task, unlike asyncio.wait_for.
                with anyio.fail_after(timeout):
                    result = await self._client.call_tool(name, arguments)
                return ToolResult(
                    result_text(result), bool(result.is_error), result.structured_content
                )
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - transport errors of every kind
                last_error = error
                if attempt == 0:
                    try:
                        await self._restart(generation)
                    except ServerUnavailable as restart_error:
                        last_error = restart_error
                        break
        raise ServerUnavailable(
            f"MCP server {self.spec.name!r} failed on tool {name!r} "
            f"({_describe(last_error)}), also after a restart{self.stderr_tail()}"
        )

    def stderr_tail(self) -> str:
        try:
            self._errlog.flush()
            self._errlog.seek(0, os.SEEK_END)
            size = self._errlog.tell()
            self._errlog.seek(max(0, size - STDERR_TAIL_CHARS * 4))
            tail = self._errlog.read()[-STDERR_TAIL_CHARS:].strip()
        except (ValueError, OSError):
            return ""
        return f"; server stderr: {tail}" if tail else ""


def _describe(error: BaseException | None) -> str:
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    inner_errors = getattr(error, "exceptions", None)  # exception groups from task groups
    if inner_errors:
        return "; ".join(_describe(inner) for inner in inner_errors)
    return f"{type(error).__name__}: {error}" if error else "unknown error"
