"""Opt-in network: only the policy's allowlist is reachable, through the sandbox's proxy."""

from __future__ import annotations

import http.server
import textwrap
import threading

import pytest
from rllm_envs.sandbox import ExecutionRequest, make_sandbox
from rllm_envs.sandbox.egress import Destination, parse_allowlist

from tests.sandbox.conftest import TEST_POLICY, require_backend


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def two_host_servers():
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello) for _ in range(2)]
    threads = [threading.Thread(target=server.serve_forever, daemon=True) for server in servers]
    for thread in threads:
        thread.start()
    yield [server.server_address[1] for server in servers]
    for server in servers:
        server.shutdown()
        server.server_close()


PROBE = """
import socket, urllib.request
for port in ({allowed}, {blocked}):
    try:
        print(port, urllib.request.urlopen(f"http://127.0.0.1:{{port}}/x?y=1", timeout=5).read())
    except Exception as error:
        print(port, "refused:", error)
try:
    socket.create_connection(("127.0.0.1", {allowed}), timeout=1)
    print("raw socket reached the host")
except OSError:
    print("raw socket blocked")
"""


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_only_allowlisted_destinations_are_reachable(backend, two_host_servers):
    require_backend(backend)
    allowed, blocked = two_host_servers
    policy = TEST_POLICY.with_limits(network_allowlist=(f"127.0.0.1:{allowed}",))
    box = make_sandbox(backend, policy)
    try:
        code = textwrap.dedent(PROBE.format(allowed=allowed, blocked=blocked))
        result = box.run(ExecutionRequest(("python3", "-c", code)))
        assert f"{allowed} b'hello /x?y=1'" in result.stdout, result
        assert f"{blocked} refused: HTTP Error 403" in result.stdout, result
        assert "raw socket blocked" in result.stdout
        assert box.describe()["network_allowlist"] == [f"127.0.0.1:{allowed}"]
    finally:
        box.close()
    box.close()  # idempotent


def test_allowlist_entries_are_parsed_strictly():
    assert parse_allowlist(["Example.org", "api.example.org:443", "[::1]:8080"]) == (
        Destination("example.org", None),
        Destination("api.example.org", 443),
        Destination("::1", 8080),
    )
    assert Destination("example.org", None).allows("EXAMPLE.org", 80)
    assert not Destination("example.org", 443).allows("example.org", 80)
    with pytest.raises(ValueError, match="use 'host' or 'host:port'"):
        parse_allowlist(["::1"])
