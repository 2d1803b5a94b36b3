"""The task web app: a stdlib HTTP server on 127.0.0.1, shared by every web env in a process.

Each episode is a *session*, named by a random token the env puts in the browser context's
cookie. ``GET /<family>[/...]`` serves the family's single-page app with the session's public
instance data inlined (one request per page load: fresh contexts have empty caches), and the
page's scripts report app state with ``POST /api/state`` (a synchronous request, so the state is
recorded before the action that caused it returns). Validators read that state here, on the
server side, never from the page.
"""

from __future__ import annotations

import atexit
import html
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SITE = Path(__file__).parent / "app"  # the pages, scripts and style of the task app
SESSION_COOKIE = "rllm_session"
SPARE_PATH = "/__spare"  # the empty app page spare contexts wait on
MAX_STATE_BYTES = 256 * 1024


@dataclass
class Session:
    family: str | None = None  # None until a task is bound to the reserved session
    title: str = ""
    public: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    updates: int = 0


def render_page(assets: dict[str, str], session: Session | None) -> bytes:
    """A task page, or (no session) the spare page: the shell with no task, which a reset
    boots into the task in place (``boot`` in app.js) without loading a new document."""
    if session is None:
        title, data, boot = "", "null", ""
    else:
        title = session.title
        data = json.dumps(session.public).replace("</", "<\\/")  # cannot close the script tag
        boot = 'start(JSON.parse(document.getElementById("task").textContent));\n'
        boot += family_script(assets, session.family or "")
    page = (
        assets["shell.html"]
        .replace("__TITLE__", html.escape(title))
        .replace("__STYLE__", assets["app.css"])
        .replace("__APP__", assets["app.js"])
        .replace("__TASK__", data)
        .replace("__BOOT__", boot.replace("</", "<\\/"))
    )
    return page.encode("utf-8")


def family_script(assets: dict[str, str], family: str) -> str:
    script = assets.get(f"{family}.js")
    if script is None:
        raise KeyError(f"no page script for task family {family!r}")
    return script


def load_assets(site: Path = SITE) -> dict[str, str]:
    return {
        path.name: path.read_text(encoding="utf-8") for path in site.iterdir() if path.is_file()
    }


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A context closed mid-request drops its connection: normal here, not worth a trace.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class TaskServer:
    """The HTTP server thread plus its sessions (see the module docstring)."""

    def __init__(self) -> None:
        self.owner_pid = os.getpid()
        self.assets = load_assets()
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler_class(self))
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="rllm-web-tasks", daemon=True
        )
        self.thread.start()

    def reserve_session(self) -> str:
        """A new session with no task yet: spare browser contexts carry its cookie ahead of
        time, so a reset only binds the task here instead of talking to the browser."""
        token = secrets.token_hex(16)
        with self.lock:
            self.sessions[token] = Session()
        return token

    def bind_session(self, token: str, family: str, title: str, public: dict[str, Any]) -> None:
        with self.lock:
            self.sessions[token] = Session(family, title, public)

    def close_session(self, token: str) -> None:
        with self.lock:
            self.sessions.pop(token, None)

    def state(self, token: str) -> dict[str, Any]:
        """A copy of the app state the session's pages reported."""
        with self.lock:
            session = self.sessions.get(token)
            return json.loads(json.dumps(session.state)) if session else {}

    def session(self, token: str | None) -> Session | None:
        with self.lock:
            return self.sessions.get(token) if token else None

    def record(self, token: str | None, update: dict[str, Any]) -> bool:
        with self.lock:
            session = self.sessions.get(token) if token else None
            if session is None or session.family is None:
                return False
            session.state.update(update)
            session.updates += 1
            return True

    def shutdown(self) -> None:
        if os.getpid() != self.owner_pid:
            return  # a forked child inherited the exit hook; the serving thread is not here
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def _session_token(handler: BaseHTTPRequestHandler) -> str | None:
    cookie = SimpleCookie()
    try:
        cookie.load(handler.headers.get("Cookie", ""))
    except Exception:  # a malformed cookie header is a request without a session
        return None
    morsel = cookie.get(SESSION_COOKIE)
    return morsel.value if morsel else None


def _handler_class(server: TaskServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # a request log per page load would flood the training logs

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _text(self, status: HTTPStatus, message: str) -> None:
            page = f"<!doctype html><title>{status.phrase}</title><h1>{html.escape(message)}</h1>"
            self._send(status, page.encode(), "text/html; charset=utf-8")

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0].split("#", 1)[0]
            family = path.strip("/").split("/", 1)[0]
            if family == "favicon.ico":
                self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
                return
            if family == SPARE_PATH.strip("/"):
                self._send(
                    HTTPStatus.OK, render_page(server.assets, None), "text/html; charset=utf-8"
                )
                return
            session = server.session(_session_token(self))
            if session is None or session.family is None:
                self._text(HTTPStatus.FORBIDDEN, "No task is open in this browser.")
                return
            if family != session.family:
                self._text(HTTPStatus.NOT_FOUND, "Page not found.")
                return
            self._send(
                HTTPStatus.OK, render_page(server.assets, session), "text/html; charset=utf-8"
            )

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/api/state":
                self._text(HTTPStatus.NOT_FOUND, "Page not found.")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_STATE_BYTES:
                self._text(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "State too large.")
                return
            try:
                update = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                update = None
            if not isinstance(update, dict):
                self._send(HTTPStatus.BAD_REQUEST, b'{"ok": false}', "application/json")
                return
            ok = server.record(_session_token(self), update)
            status = HTTPStatus.OK if ok else HTTPStatus.FORBIDDEN
            self._send(status, json.dumps({"ok": ok}).encode(), "application/json")

    return Handler


@dataclass
class _ProcessServer:
    """The process's one task server; envs hold references and the last one stops it. A forked
    child starts its own (the server thread does not survive a fork)."""

    pid: int = -1
    server: TaskServer | None = None
    users: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acquire(self) -> TaskServer:
        with self.lock:
            if self.server is None or self.pid != os.getpid():
                self.server, self.pid, self.users = TaskServer(), os.getpid(), 0
                atexit.register(self.server.shutdown)
            self.users += 1
            return self.server

    def release(self, server: TaskServer) -> None:
        with self.lock:
            if server is not self.server:
                return
            self.users -= 1
            if self.users <= 0:
                self.server = None
                atexit.unregister(server.shutdown)
                server.shutdown()


# Process-wide by design: one server per process is what makes a reset cheap.
_PROCESS_SERVER = _ProcessServer()


def acquire_server() -> TaskServer:
    return _PROCESS_SERVER.acquire()


def release_server(server: TaskServer) -> None:
    _PROCESS_SERVER.release(server)
