"""A client's own faults cost the gateway's log one debug line, never an error with a traceback.

Agent programs hang up mid-request (killed on a timeout, a crashed tool, a user's Ctrl-C), and
a broken or hostile client sends HTTP that does not parse. Neither is the gateway's failure,
and under ``rllm-eval`` a traceback for each would bury the console. The gateway's own
failures keep their tracebacks.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError


def client_gone(request: web.Request, error: BaseException) -> bool:
    """Whether `error` is `request`'s client having hung up: a reset connection, and the
    request's own connection closed (a reset from anywhere else is a real failure)."""
    if not isinstance(error, ConnectionResetError):
        return False
    transport = request.transport
    return transport is None or transport.is_closing()


class ServerLog(logging.LoggerAdapter):
    """aiohttp's server logger for the gateway's runner: HTTP that aiohttp cannot parse (a bad
    Content-Length, a malformed header or chunk - answered 400 by aiohttp itself) is logged
    as one debug line instead of aiohttp's error with a traceback."""

    def __init__(self) -> None:
        # aiohttp's own logger, so logging set up for aiohttp still applies.
        super().__init__(logging.getLogger("aiohttp.server"), {})

    def exception(self, msg: Any, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            # aiohttp's message spans lines (it points at the bad byte); one line is enough.
            reason = " ".join(str(exc_info).split())
            self.debug(f"{msg}: the client sent HTTP that does not parse: %s", *args, reason)
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)
