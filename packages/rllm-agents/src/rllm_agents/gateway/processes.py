"""`GatewayProcesses`: the gateway served by several processes, for programs by the hundred.

One :class:`~rllm_agents.gateway.server.Gateway` is one Python process: every call costs it two
HTTP exchanges (the program's, the engine's) and a few JSON bodies, about 0.5 ms of CPU. When
hundreds of programs call in the same instant - as GRPO groups do, every turn - the last call
of the burst waits for all the others, and that wait comes back every turn
(``benchmarks/gateway_overhead.py`` measures it). This class spreads the sessions over
``processes`` child processes, each a whole Gateway with its own copy of the engine:

    async with GatewayProcesses(OpenAIEngine(url, model), processes=4) as gateway:
        session = gateway.open_session()          # served by one of the processes
        ...                                        # the program calls session.base_url
        calls = await gateway.aclose_session(session.id)

A session lives in one process from open to close (its base URL carries that process's port),
so everything a session keeps between calls - the model's own tokens reused in the next
prompt, the call order - stays where its calls are served. Only the engine must be copyable to
another process: an engine for an OpenAI-compatible server is (the server does the work); an
engine holding a model in this process is refused, since a copy would be a second model.

The parent talks to each process over a pipe: opening a session is a message with no answer
(the process reads it before it serves the session's first call, since the message was written
before the session's URL was handed out); closing one waits for the process to send the
recorded calls back. A process that dies makes its sessions' closes fail with its exit code.
The processes die with the parent, also when the parent is killed outright.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from rllm_agents.gateway import openai_shapes as shapes
from rllm_agents.gateway.server import Gateway
from rllm_agents.gateway.sessions import GatewaySession, RecordedCall, SessionHost, http_root

START_TIMEOUT_S = 120.0  # spawning imports aiohttp and, with a tokenizer, transformers
STOP_TIMEOUT_S = 10.0
# A serving process's command (not ``-m`` this module: the package imports it first).
SERVING_MAIN = (
    "import sys; from rllm_agents.gateway.processes import serve_sessions; "
    "serve_sessions(int(sys.argv[1]))"
)


@dataclass(frozen=True)
class ServingSpec:
    """What one serving process needs to build its Gateway (pickled to it)."""

    engine: Any
    tokenizer: Any
    host: str
    api_key: str | None
    model_name: str
    max_body_bytes: int
    context_length: int | None


@dataclass
class _Process:
    """The parent's handle on one serving process."""

    index: int
    process: subprocess.Popen
    conn: Connection
    port: int = 0
    pending: dict[str, asyncio.Future] = field(default_factory=dict)
    exit_reason: str | None = None

    def fail_pending(self, reason: str) -> None:
        self.exit_reason = reason
        for future in self.pending.values():
            if not future.done():
                future.set_exception(RuntimeError(reason))
        self.pending.clear()


class GatewayProcesses(SessionHost):
    """Serve `engine` over the OpenAI API from `processes` child processes (see module doc)."""

    def __init__(
        self,
        engine: Any,
        *,
        processes: int = 2,
        host: str = "127.0.0.1",
        api_key: str | None = None,
        model_name: str = "rllm-gateway",
        tokenizer: Any = None,
        max_body_bytes: int = 64 * 1024 * 1024,
        context_length: int | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        if not getattr(engine, "serves_from_any_process", False):
            raise ValueError(
                f"{type(engine).__name__} cannot be served from other processes: its model "
                "lives in this one. Serve it with Gateway (one process), or put it behind an "
                "OpenAI-compatible server and give GatewayProcesses an OpenAIEngine for it"
            )
        self.spec = ServingSpec(
            engine=engine,
            tokenizer=tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None),
            host=host,
            api_key=api_key,
            model_name=model_name,
            max_body_bytes=max_body_bytes,
            context_length=context_length,
        )
        self.processes = processes
        self.model_name = model_name
        self._children: list[_Process] = []
        self._sessions: dict[str, tuple[GatewaySession, _Process]] = {}
        self._turns = itertools.count()

    # ---- lifecycle ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return bool(self._children)

    @property
    def ports(self) -> list[int]:
        return [child.port for child in self._children]

    @property
    def pids(self) -> list[int]:
        return [child.process.pid for child in self._children]

    async def start(self) -> GatewayProcesses:
        if self._children:
            return self
        children: list[_Process] = []
        try:
            for index in range(self.processes):
                children.append(_spawn(index, self.spec))
            ports = await asyncio.wait_for(
                asyncio.gather(*(_receive(child.conn) for child in children)), START_TIMEOUT_S
            )
        except BaseException:
            _kill(children)
            raise
        loop = asyncio.get_running_loop()
        for child, (kind, value) in zip(children, ports, strict=True):
            if kind != "ready":
                _kill(children)
                raise RuntimeError(f"gateway process {child.index} failed to start: {value}")
            child.port = value
            loop.add_reader(child.conn.fileno(), self._on_message, child)
        self._children = children
        return self

    async def stop(self) -> None:
        """Stop every process (calls in flight are cancelled); open sessions are lost."""
        children, self._children = self._children, []
        loop = asyncio.get_running_loop()
        for child in children:
            loop.remove_reader(child.conn.fileno())
            child.fail_pending("the gateway was stopped")
            try:
                child.conn.send(("stop",))
            except (OSError, ValueError):
                pass  # already gone
        await asyncio.gather(*(_wait_exit(child.process) for child in children))
        _kill(children)
        self._sessions.clear()

    # ---- sessions -------------------------------------------------------------------------------

    def open_session(
        self, session_id: str | None = None, sampling_defaults: dict[str, Any] | None = None
    ) -> GatewaySession:
        """Start recording a new session in the next process in turn (see Gateway's)."""
        if not self._children:
            raise RuntimeError("start the gateway before opening sessions")
        session_id = self._session_id(session_id)
        live = [child for child in self._children if child.exit_reason is None]
        if not live:
            raise RuntimeError(f"every gateway process has exited: {self._children[0].exit_reason}")
        child = live[next(self._turns) % len(live)]
        defaults = shapes.sampling_defaults(sampling_defaults)  # checked here, not there
        try:
            child.conn.send(("open", session_id, sampling_defaults))
        except OSError:  # it died before its end of the socket told this loop
            self._lost(child)
            return self.open_session(session_id, sampling_defaults)
        root = http_root(self.spec.host, child.port)
        session = self._new_session(session_id, root, self.spec.api_key, defaults)
        self._sessions[session_id] = (session, child)
        return session

    async def aclose_session(self, session_id: str) -> list[RecordedCall]:
        """Stop recording `session_id`; its calls, fetched from the process that served it."""
        try:
            session, child = self._sessions.pop(session_id)
        except KeyError:
            raise KeyError(f"no open session {session_id!r}") from None
        if child.exit_reason is not None:
            raise RuntimeError(child.exit_reason)
        answer = asyncio.get_running_loop().create_future()
        child.pending[session_id] = answer
        try:
            child.conn.send(("close", session_id))
        except OSError:
            self._lost(child)  # fails `answer` with the process's exit reason
        calls, failed_calls = await answer
        session.failed_calls = failed_calls
        session.closed = True
        return calls

    # ---- messages from the processes -----------------------------------------------------------

    def _on_message(self, child: _Process) -> None:
        try:
            while child.conn.poll():
                kind, session_id, *payload = child.conn.recv()
                answer = child.pending.pop(session_id, None)
                if answer is None or answer.done():
                    continue  # its closer was cancelled
                if kind == "closed":
                    answer.set_result(tuple(payload))
                else:
                    answer.set_exception(RuntimeError(payload[0]))
        except (EOFError, OSError):
            self._lost(child)

    def _lost(self, child: _Process) -> None:
        """`child` has exited: stop reading it and fail what waits on it."""
        if child.exit_reason is not None:
            return
        asyncio.get_running_loop().remove_reader(child.conn.fileno())
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(1.0)
        child.fail_pending(
            f"gateway process {child.index} exited (code {child.process.returncode}); "
            "its sessions' calls are lost"
        )


def _spawn(index: int, spec: ServingSpec) -> _Process:
    """Start serving process `index` and hand it `spec` over its control socket.

    A fresh interpreter, not multiprocessing's spawn: that one re-imports the
    caller's ``__main__``, which breaks (or re-runs) any script without a main guard.
    """
    from rllm_agents.run_folder import die_with_parent

    parent_end, child_end = socket.socketpair()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVING_MAIN, str(child_end.fileno())],
            pass_fds=(child_end.fileno(),),
            preexec_fn=die_with_parent,  # noqa: PLW1509 - it only calls prctl
        )
    except BaseException:
        parent_end.close()
        raise
    finally:
        child_end.close()
    conn = Connection(parent_end.detach())
    conn.send(spec)
    return _Process(index, process, conn)


def _kill(children: list[_Process]) -> None:
    for child in children:
        if child.process.poll() is None:
            child.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(STOP_TIMEOUT_S)
        child.conn.close()


async def _receive(conn: Connection) -> Any:
    """The next message on `conn`, without blocking the loop."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(conn.fileno(), lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())
    try:
        return conn.recv()
    except EOFError:
        return ("exited", "the process ended before it was ready")


# ---- the serving process -----------------------------------------------------------------------


async def _wait_exit(process: subprocess.Popen) -> None:
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def serve_sessions(control_fd: int) -> None:
    """A serving process's main: a Gateway whose sessions the parent opens and closes."""
    from rllm_agents.engines import event_loop

    conn = Connection(control_fd)
    spec = conn.recv()
    event_loop.run(_serve(spec, conn))


async def _serve(spec: ServingSpec, conn: Connection) -> None:
    gateway = Gateway(
        spec.engine,
        host=spec.host,
        api_key=spec.api_key,
        model_name=spec.model_name,
        tokenizer=spec.tokenizer,
        max_body_bytes=spec.max_body_bytes,
        context_length=spec.context_length,
    )
    try:
        await gateway.start()
    except Exception as exc:  # noqa: BLE001 - the parent raises it with the reason
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    stopped = asyncio.get_running_loop().create_future()
    handle = _ControlHandler(gateway, conn, stopped)
    gateway.before_unknown_session = handle.read_all
    conn.send(("ready", gateway.port))
    loop = asyncio.get_running_loop()
    loop.add_reader(conn.fileno(), handle.read_all)
    try:
        await stopped
    finally:
        loop.remove_reader(conn.fileno())
        await gateway.stop()
        close = getattr(spec.engine, "aclose", None)
        if close is not None:
            await close()


@dataclass
class _ControlHandler:
    """The serving process's side of the pipe: open, close, stop."""

    gateway: Gateway
    conn: Connection
    stopped: asyncio.Future
    failed_opens: dict[str, str] = field(default_factory=dict)

    def read_all(self) -> None:
        try:
            while not self.stopped.done() and self.conn.poll():
                self._handle(*self.conn.recv())
        except (EOFError, OSError):  # the parent is gone: nobody will take the calls
            if not self.stopped.done():
                self.stopped.set_result(None)

    def _handle(self, kind: str, *args: Any) -> None:
        handlers: dict[str, Callable[..., None]] = {
            "open": self._open,
            "close": self._close,
            "stop": self._stop,
        }
        handlers[kind](*args)

    def _open(self, session_id: str, sampling_defaults: dict[str, Any] | None) -> None:
        # The parent checked the id and the defaults; a failure here is kept for the close.
        try:
            self.gateway.open_session(session_id, sampling_defaults)
        except Exception as exc:  # noqa: BLE001 - reported when the parent closes the session
            self.failed_opens[session_id] = f"{type(exc).__name__}: {exc}"

    def _close(self, session_id: str) -> None:
        reason = self.failed_opens.pop(session_id, None)
        if reason is not None:
            self.conn.send(("error", session_id, f"the session could not be opened: {reason}"))
            return
        session = self.gateway.session(session_id)
        calls = self.gateway.close_session(session_id)
        self.conn.send(("closed", session_id, calls, session.failed_calls))

    def _stop(self) -> None:
        if not self.stopped.done():
            self.stopped.set_result(None)
