"""The viewer's local HTTP server: one static page and a small JSON API over one run.

``GET /`` the page; ``GET /api/run`` the run's overview (:func:`~.runs.run_overview`);
``GET /api/episodes?reward_min=&reward_max=&task=&outcome=&step=`` the matching episodes' rows;
``GET /api/episode?index=N`` one episode in full. Standard library only: it serves one person
on their own machine, by default on 127.0.0.1.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from rllm_agents.viewer.runs import (
    EpisodeQuery,
    Run,
    RunError,
    episode_detail,
    episode_rows,
    run_overview,
)

Decode = Callable[[list[int]], str]


@dataclass(frozen=True)
class Viewer:
    """What the handlers read: the run, and how to turn token ids into text (or None)."""

    run: Run
    decode: Decode | None

    def overview(self, params: dict[str, str]) -> dict[str, Any]:
        return run_overview(self.run)

    def episodes(self, params: dict[str, str]) -> dict[str, Any]:
        query = EpisodeQuery.from_params(params)
        rows = episode_rows(self.run)
        matching = [row for row in rows if query.matches(row)]
        return {"total": len(rows), "episodes": matching}

    def episode(self, params: dict[str, str]) -> dict[str, Any]:
        text = params.get("index", "")
        if not text.isdigit() or int(text) >= len(self.run.episodes):
            raise LookupError(f"no episode {text!r}; the run has {len(self.run.episodes)}")
        index = int(text)
        return episode_detail(index, self.run.episodes[index], self.decode, self.run.steps[index])


# Path -> the name of the Viewer method that answers it (looked up on the instance, so a
# subclass's method answers).
API_ROUTES: dict[str, str] = {
    "/api/run": "overview",
    "/api/episodes": "episodes",
    "/api/episode": "episode",
}


@functools.cache
def page() -> bytes:
    return resources.files("rllm_agents.viewer").joinpath("static/index.html").read_bytes()


class Handler(http.server.BaseHTTPRequestHandler):
    viewer: Viewer  # set on the subclass made for each server (see make_server)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        url = urllib.parse.urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(200, page(), "text/html; charset=utf-8")
            return
        route = API_ROUTES.get(url.path)
        if route is None:
            self._json(404, {"error": f"no such page: {url.path}"})
            return
        params = {key: values[-1] for key, values in urllib.parse.parse_qs(url.query).items()}
        try:
            self._json(200, getattr(self.viewer, route)(params))
        except RunError as error:
            self._json(400, {"error": str(error)})
        except LookupError as error:
            self._json(404, {"error": str(error.args[0])})

    def _json(self, status: int, data: dict[str, Any]) -> None:
        body = json.dumps(data, allow_nan=False, default=str).encode()
        self._send(status, body, "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # a request log on the terminal would bury the URL the command printed


def make_server(viewer: Viewer, host: str = "127.0.0.1", port: int = 0):
    """A threading HTTP server for `viewer` (port 0: a free one; read ``server_address``)."""
    handler = type("RunHandler", (Handler,), {"viewer": viewer})
    return http.server.ThreadingHTTPServer((host, port), handler)


def serve_in_background(server) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="rllm-view", daemon=True)
    thread.start()
    return thread
