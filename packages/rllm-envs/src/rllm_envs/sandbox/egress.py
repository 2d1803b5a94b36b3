"""Opt-in network for sandboxes: an allowlisting HTTP proxy on the host.

A sandbox never gets a network of its own. When its policy names a `network_allowlist`, the
backend starts an :class:`EgressProxy` on a Unix socket, mounts that socket's folder into the
sandbox read-only at :data:`MOUNT_POINT`, and runs the program behind `egress_relay.py`, which
listens on 127.0.0.1::data:`RELAY_PORT` inside the sandbox and sets HTTP_PROXY/HTTPS_PROXY to
it. The proxy serves `CONNECT host:port` (HTTPS and any TCP protocol a client tunnels) and
absolute-form HTTP requests, and only to allowlisted destinations; everything else gets
`403 Forbidden`. Raw sockets to other addresses find no route.
"""

from __future__ import annotations

import os
import shutil
import socket
import socketserver
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from urllib.parse import urlsplit

# The in-sandbox relay's byte pump serves the host side too (it is stdlib-only by design).
from rllm_envs.sandbox.egress_relay import pump

MOUNT_POINT = "/run/rllm-egress"
RELAY_PORT = 3128
_MAX_HEADER_BYTES = 64 * 1024


@dataclass(frozen=True)
class Destination:
    host: str
    port: int | None  # None: any port

    @classmethod
    def parse(cls, entry: str) -> Destination:
        """`host` (any port) or `host:port`; IPv6 addresses in brackets: `[::1]:8080`."""
        text = entry.strip().lower()
        host, port = text, None
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = rest.removeprefix(":") or None
        elif text.count(":") == 1:
            host, port = text.split(":")
        if not host or ":" in host and not text.startswith("[") or (port and not port.isdigit()):
            raise ValueError(f"bad network_allowlist entry {entry!r}: use 'host' or 'host:port'")
        return cls(host, int(port) if port else None)

    def allows(self, host: str, port: int) -> bool:
        return host.lower() == self.host and self.port in (None, port)


def parse_allowlist(entries: Iterable[str]) -> tuple[Destination, ...]:
    return tuple(Destination.parse(entry) for entry in entries)


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """The request head (through the blank line) and whatever body bytes came with it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(4096)
        if not chunk or len(data) > _MAX_HEADER_BYTES:
            raise ValueError("incomplete request head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _target(method: str, target: str) -> tuple[str, int, str | None]:
    """(host, port, origin-form path or None for CONNECT) of a proxy request line."""
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return host.strip("[]"), int(port), None
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError("only http:// URLs and CONNECT are proxied")
    path = url.path or "/"
    return url.hostname, url.port or 80, path + (f"?{url.query}" if url.query else "")


class _Handler(socketserver.BaseRequestHandler):
    server: _ProxyServer

    def handle(self) -> None:
        client: socket.socket = self.request
        try:
            head, rest = _read_head(client)
            request_line, _, headers = head.partition(b"\r\n")
            method, target, version = request_line.decode("latin-1").split(" ", 2)
            host, port, path = _target(method.upper(), target)
        except (ValueError, OSError):
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        if not any(rule.allows(host, port) for rule in self.server.allowlist):
            body = f"{host}:{port} is not in the sandbox's network allowlist\n".encode()
            client.sendall(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            return
        try:
            upstream = socket.create_connection((host, port), timeout=10)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        upstream.settimeout(None)
        with upstream:
            if path is None:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                line = f"{method} {path} {version}\r\n".encode("latin-1")
                upstream.sendall(line + headers + b"\r\n\r\n" + rest)
            replies = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            replies.start()
            pump(client, upstream)
            replies.join()


class _ProxyServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allowlist: tuple[Destination, ...] = ()


class EgressProxy:
    """The host side of a sandbox's allowlisted network; `close()` stops it (idempotent)."""

    def __init__(self, allowlist: Iterable[str]) -> None:
        self.allowlist = parse_allowlist(allowlist)
        self.folder = tempfile.mkdtemp(prefix="rllm-egress-")
        os.chmod(self.folder, 0o755)  # the sandbox user must reach the socket
        relay = resources.files("rllm_envs.sandbox").joinpath("egress_relay.py").read_bytes()
        with open(os.path.join(self.folder, "relay.py"), "wb") as handle:
            handle.write(relay)
        socket_path = os.path.join(self.folder, "proxy.sock")
        self._server = _ProxyServer(socket_path, _Handler)
        self._server.allowlist = self.allowlist
        os.chmod(socket_path, 0o777)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._closed = False

    def wrap(self, argv: Iterable[str]) -> list[str]:
        """`argv` run behind the in-sandbox relay (paths as seen inside the sandbox)."""
        relay = f"{MOUNT_POINT}/relay.py"
        return ["python3", "-I", relay, str(RELAY_PORT), f"{MOUNT_POINT}/proxy.sock", "--", *argv]

    @staticmethod
    def environment() -> dict[str, str]:
        proxy = f"http://127.0.0.1:{RELAY_PORT}"
        return {name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self.folder, ignore_errors=True)
