"""Shared by the rllm/Web-v0 tests: what they need to run, and a site outside the task app,
served on 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.server
import importlib.util

from tests.loopback import serve_http
from tests.parts import require_part


def require_web() -> None:
    """Skip (locally) or fail (under CI) without Playwright and a Chromium to drive."""
    require_part(
        importlib.util.find_spec("playwright") is not None,
        "playwright is not installed (pip install 'rllm-envs[web]')",
    )
    from rllm_envs.web.browser import find_browser

    require_part(find_browser() is not None, "no Chromium found (apt-get install chromium)")


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
