"""A model server run as a child process for as long as its owner: started, awaited until it
answers, and killed with everything it started.

The child gets a session (process group) of its own, so ``close()`` reaches the processes it
starts in turn (vLLM's engine core and workers); its log goes to a temp file (a pipe nobody
reads would fill and block it). It is killed on ``close()``, on leaving the ``with`` block
(also on errors) and at interpreter exit; a parent killed outright (``kill -9``) takes it
along through Linux's parent-death signal, set in the child before it runs. (That signal
fires when the *thread* that started the server ends: start it from a thread that lives as
long as the server, as the CLIs do from their main thread.) A child's own children get no
such signal: a server that starts some (vLLM does) is watched by the reaper
(rllm_agents.reaper) once it answers, so those die with the owner too.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

import httpx

from rllm_agents.engines.base import EngineError
from rllm_agents.run_folder import die_with_parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ChildServer:
    """One server process owned by this object. Subclasses say what to run (``command``),
    in which environment, and check what it needs before it starts (``check``)."""

    kind = "model server"  # how errors name it
    watch_descendants = False  # whether the server's own children need the reaper

    def __init__(self, *, port: int | None = None, startup_timeout_s: float = 120.0) -> None:
        self.port = port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen | None = None
        self._log: Any = None
        self._watchdog: Any = None

    # ---- what a subclass says ---------------------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """The child's environment (None: this process's)."""
        return None

    def check(self) -> None:
        """Raise a clear error when the server cannot start here (a missing package or file)."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- lifetime ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> ChildServer:
        """Launch the server and wait until it answers."""
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def launch(self) -> ChildServer:
        """Start the process without waiting for it (several servers then load at once)."""
        if self._process is not None:
            return self
        self.check()
        self._log = tempfile.TemporaryFile(prefix="rllm-server-")
        self._process = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            start_new_session=True,  # its own process group, so close() reaches its children
            preexec_fn=die_with_parent,  # SIGKILL of this process ends the server too
        )
        atexit.register(self.close)
        return self

    def wait_ready(self) -> None:
        if self._process is None:
            raise EngineError(f"{self.kind} not launched")
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EngineError(
                    f"{self.kind} exited with code {self._process.returncode}:\n" + self.log_tail()
                )
            try:
                if httpx.get(f"{self.base_url}/models", timeout=1.0).status_code == 200:
                    self._watch()
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise EngineError(
            f"{self.kind} not ready after {self.startup_timeout_s:.0f}s:\n" + self.log_tail()
        )

    def _watch(self) -> None:
        if not self.watch_descendants or self._process is None:
            return
        from rllm_agents import reaper

        # The server itself has its parent-death signal; the watchdog ends what it started.
        self._watchdog = reaper.watch(self._process.pid)

    def log_tail(self, max_chars: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-max_chars:]

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                signal_group(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    pass
            # Whatever is left in its group (children that ignored SIGTERM or were slow).
            signal_group(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait(timeout=10)
            atexit.unregister(self.close)
        if self._watchdog is not None:
            self._watchdog.release()
            self._watchdog = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ChildServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # already gone
