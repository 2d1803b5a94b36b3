"""The math-verify worker process: ``python -m rllm_envs.math.verify_worker``.

It reads one JSON request a line (``{"gold": ..., "answer": ...}``, LaTeX without ``$``) from
stdin and writes one JSON reply a line (``{"equal": bool}`` or ``{"error": str}``). Deadlines
are the parent's business (:class:`rllm_envs.math.verifier.Verifier` kills a worker that is
late), which is why math-verify's own signal-based timeouts are off here.
"""

from __future__ import annotations

import json
import sys

from rllm_envs.math.verifier import READY_LINE


def _die_with_parent() -> None:
    """Ask Linux to kill this worker if its parent dies, even while sympy is busy."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the worker still exits when its stdin closes


def _cap_memory(limit_bytes: int = 4 << 30) -> None:
    """Bound the address space: an answer that makes sympy build a giant number fails with a
    MemoryError here instead of swapping the machine before the deadline comes."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    except (ImportError, ValueError, OSError):
        pass  # not available on this platform


def _as_math(latex: str) -> str:
    # math-verify reads LaTeX only between math delimiters.
    return latex if latex.lstrip().startswith("$") else f"${latex}$"


def serve() -> None:
    import logging

    _die_with_parent()
    _cap_memory()
    logging.disable(logging.WARNING)  # math-verify warns that we handle timeouts ourselves
    from math_verify import parse, verify

    sys.stdout.buffer.write(READY_LINE)
    sys.stdout.buffer.flush()
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            gold = parse(_as_math(request["gold"]), parsing_timeout=None)
            answer = parse(_as_math(request["answer"]), parsing_timeout=None)
            reply = {"equal": bool(gold and answer and verify(gold, answer, timeout_seconds=None))}
        except Exception as error:  # noqa: BLE001 - any failure becomes a reply, not a hang
            reply = {"error": f"{type(error).__name__}: {error}"[:500]}
        sys.stdout.buffer.write(json.dumps(reply).encode() + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    serve()
