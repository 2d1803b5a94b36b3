"""Shared by the rllm/Web-v0 tests: a site outside the task app, served on 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.server

from tests.loopback import serve_http


class OutsideSite(http.server.BaseHTTPRequestHandler):
    """A site that is not the task server: allowlist, hung-page, open-ended and snapshot
    refusal tests visit it."""

    pages = {
        "/": b"<!doctype html><title>Outside</title><h1>Outside page</h1>"
        b"<button onclick=\"document.title='Clicked'\">Press me</button>",
        "/hang": b"<!doctype html><title>Hang</title><h1>Busy</h1>"
        b"<script>setTimeout(() => { for (;;) {} }, 50)</script>",
    }

    def do_GET(self):  # noqa: N802
        body = self.pages.get(self.path.split("?")[0], b"not found")
        self.send_response(200 if self.path.split("?")[0] in self.pages else 404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def outside_site() -> contextlib.AbstractContextManager[str]:
    """Serve :class:`OutsideSite`; the context manager yields its origin."""
    return serve_http(OutsideSite)
