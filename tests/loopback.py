"""A throwaway HTTP server on 127.0.0.1 for tests that need a site of their own."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def serve_http(handler: Callable[..., Any]) -> Iterator[str]:
    """Serve `handler` (a request handler class or factory) on a free port; yields the origin."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
