"""A math-verify worker process with a hard per-answer deadline.

math-verify's own timeouts use signals, which work only on the main thread, and sympy can
spin for ever on pathological LaTeX such as ``9^{9^{9^{9}}}``. So the symbolic check runs in
a persistent child process (started once, on first use: importing sympy takes a second) and
the caller waits at most ``timeout_s`` for each reply. A worker that misses its deadline is
killed and the next call starts a fresh one; the caller gets :class:`VerifierError`.

The child is a plain ``python -m`` subprocess speaking JSON lines, not a multiprocessing
child, so it also works inside daemonic processes such as Gymnasium's async vector-env
workers, and from any thread.

The worker's side is :mod:`rllm_envs.math.verify_worker`.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

# Starting the worker imports sympy and math-verify; on a busy 2-core machine that can take a
# few seconds, which must not count against the per-answer deadline.
STARTUP_TIMEOUT_S = 60.0
READY_LINE = b'"ready"\n'


class VerifierError(RuntimeError):
    """The symbolic check did not give an answer (deadline missed or worker crashed)."""


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


class Verifier:
    """Checks `answer` against `gold` with math-verify in a worker process (thread-safe)."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    def verify(self, gold: str, answer: str) -> bool:
        """True when math-verify finds `answer` equal to `gold` (both LaTeX, without `$`)."""
        request = json.dumps({"gold": gold, "answer": answer}).encode() + b"\n"
        with self._lock:
            process = self._running_worker()
            try:
                assert process.stdin is not None
                process.stdin.write(request)
                process.stdin.flush()
                line = self._read_line(process, self.timeout_s)
            except (OSError, VerifierError) as error:
                self._stop()
                raise VerifierError(f"math-verify gave no verdict: {error}") from error
        reply = json.loads(line)
        if "error" in reply:
            raise VerifierError(f"math-verify failed: {reply['error']}")
        return bool(reply["equal"])

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._stop()
        except Exception:  # noqa: BLE001 - at interpreter exit the streams may be gone already
            pass

    @property
    def worker_pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    # -- the worker's life -------------------------------------------------------------------
    def _running_worker(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [_package_root(), environment.get("PYTHONPATH")])
        )
        self._process = subprocess.Popen(
            [sys.executable, "-m", "rllm_envs.math.verify_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=environment,
        )
        try:
            ready = self._read_line(self._process, STARTUP_TIMEOUT_S)
        except VerifierError as error:
            self._stop()
            raise VerifierError(f"the math-verify worker did not start: {error}") from error
        if ready != READY_LINE:
            self._stop()
            raise VerifierError(f"the math-verify worker did not start: {ready[:200]!r}")
        return self._process

    def _read_line(self, process: subprocess.Popen[bytes], timeout_s: float) -> bytes:
        assert process.stdout is not None
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    raise VerifierError(f"no reply within {timeout_s:g} s")
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    raise VerifierError(f"the worker exited (code {process.poll()})")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def _stop(self) -> None:
        process, self._process, self._buffer = getattr(self, "_process", None), None, b""
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        if process.poll() is None:
            process.kill()
        process.wait()
