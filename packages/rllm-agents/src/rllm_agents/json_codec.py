"""JSON for the HTTP hot paths (the engine's client, the gateway): orjson, with the stdlib behind it.

Each call through the gateway decodes and encodes four JSON bodies; with the stdlib that was
about a fifth of the gateway's CPU per call (``benchmarks/gateway_overhead.py``). orjson is
several times faster. It is stricter than the stdlib in a few corners - it refuses ``NaN`` and
``Infinity`` literals (which Python-written servers may send as logprobs), integers beyond 64
bits and non-string keys - so whatever it refuses is handed to the stdlib, and the result is
the stdlib's: the same values, or the same error.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # optional in spirit: a missing wheel only costs speed
    orjson = None


def dumps(data: Any) -> bytes:
    """Compact UTF-8 JSON of `data`."""
    if orjson is not None:
        try:
            return orjson.dumps(data)
        except TypeError:
            pass  # a type or key orjson does not take: the stdlib decides
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def loads(raw: bytes | str) -> Any:
    """The value of the JSON text `raw` (ValueError when it is not JSON)."""
    if orjson is not None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # NaN, Infinity, huge integers: valid to the stdlib
    return json.loads(raw)
