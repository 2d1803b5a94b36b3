"""`ServerManager`: MCP connections shared by every env in a process, on one private event loop.

Gymnasium envs are synchronous and the MCP client is async. The manager owns an asyncio loop
on a daemon thread; envs submit coroutines to it and wait with a deadline, so an env never
hangs on a server. Connections are reference-counted per :class:`ServerSpec`: envs naming the
same server share one session (and one server process), reused across episodes, and the last
env to let go stops it. A process exit stops whatever is left.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from rllm_envs.core.async_env import Io
from rllm_envs.core.loop_bridge import LoopBridge
from rllm_envs.mcp.connection import ServerConnection, ServerUnavailable
from rllm_envs.mcp.servers import ServerSpec

# Slack on top of a coroutine's own timeout before the waiting thread gives up on the loop.
LOOP_SLACK_SECONDS = 5.0


@dataclass
class _Shared:
    connection: ServerConnection
    users: int = 0


@dataclass
class ServerManager:
    """The loop thread plus the shared connections (see the module docstring)."""

    connect_timeout: float = 30.0
    _shared: dict[ServerSpec, _Shared] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _bridge: LoopBridge | None = None  # for async callers (rllm_envs.core.loop_bridge)
    _thread: threading.Thread | None = None

    # -- the loop --------------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="rllm-mcp-loop", daemon=True)
            thread.start()
            self._loop, self._thread, self._bridge = loop, thread, LoopBridge(loop)
        return self._loop

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """Run a coroutine on the manager's loop; wait at most `timeout` (+ slack) for it."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._ensure_loop())
        try:
            return future.result(timeout + LOOP_SLACK_SECONDS)
        except concurrent.futures.TimeoutError as error:
            future.cancel()
            raise ServerUnavailable(f"no answer within {timeout:.1f} s") from error

    async def arun(self, coroutine: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """:meth:`run`, awaited from another event loop: no thread waits on the manager's.
        Cancelling the caller cancels the coroutine on the manager's loop."""
        self._ensure_loop()
        assert self._bridge is not None
        try:
            return await self._bridge.run(coroutine, timeout + LOOP_SLACK_SECONDS)
        except (TimeoutError, asyncio.TimeoutError) as error:  # the coroutine was cancelled
            raise ServerUnavailable(f"no answer within {timeout:.1f} s") from error

    def io(self, make: Callable[[], Coroutine[Any, Any, Any]], timeout: float) -> Io:
        """A coroutine for the manager's loop as a turn's I/O (rllm_envs.core.async_env)."""
        return Io(lambda: self.run(make(), timeout), lambda: self.arun(make(), timeout))

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = self._bridge = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=5)
            if not loop.is_running():
                loop.close()

    # -- connections -----------------------------------------------------------------------
    def acquire(self, spec: ServerSpec, connect_timeout: float | None = None) -> ServerConnection:
        """The shared connection for `spec`, started on first use (the first user's
        `connect_timeout` then applies to its restarts too)."""
        with self._lock:
            shared = self._shared.get(spec)
            if shared is None:
                timeout = connect_timeout or self.connect_timeout
                connection = ServerConnection(spec, connect_timeout=timeout)
                try:
                    self.run(connection.start(), timeout * 2)
                except ServerUnavailable:
                    self.run(connection.close(), timeout)  # its stderr file
                    if not self._shared:
                        self._stop_loop()
                    raise
                shared = self._shared[spec] = _Shared(connection)
            shared.users += 1
            return shared.connection

    def release(self, spec: ServerSpec) -> None:
        """Let go of a connection; the last user stops the server (and the loop, if idle)."""
        with self._lock:
            shared = self._shared.get(spec)
            if shared is None:
                return
            shared.users -= 1
            if shared.users > 0:
                return
            del self._shared[spec]
            try:
                self.run(shared.connection.close(), shared.connection.connect_timeout)
            except ServerUnavailable:
                pass  # the holder task was cancelled; the process ends with its pipes
            if not self._shared:
                self._stop_loop()

    def shutdown(self) -> None:
        """Stop every server and the loop (at process exit)."""
        with self._lock:
            shared, self._shared = list(self._shared.values()), {}
            for entry in shared:
                try:
                    self.run(entry.connection.close(), self.connect_timeout)
                except ServerUnavailable:
                    pass
            self._stop_loop()


@dataclass
class _ProcessManager:
    """The one manager of the current process; a forked child gets a fresh one (the loop
    thread does not survive a fork)."""

    pid: int = -1
    manager: ServerManager | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self) -> ServerManager:
        with self.lock:
            if self.manager is None or self.pid != os.getpid():
                self.manager, self.pid = ServerManager(), os.getpid()
                atexit.register(self.manager.shutdown)
            return self.manager


# Process-wide by design: sharing servers between envs is the point of the manager.
_PROCESS_MANAGER = _ProcessManager()


def shared_manager() -> ServerManager:
    """The process's server manager, shared by every MCP env in it."""
    return _PROCESS_MANAGER.get()
