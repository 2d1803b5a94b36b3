"""A load balancer for verl's rollout servers that does not import verl.

verl sends every agent-loop request through one load-balancer actor, a process of its own. Its
default balancer is defined in a verl module, so that process imports all of verl (torch,
tensordict, transformers: about 15 s of CPU on 2 cores) to route requests among a server or
two. :class:`StickyLeastBusyRouter` routes by the same rules - the turns of one request id stay
on the server that took its first turn; a new id goes to a server with the fewest requests in
flight - and answers the calls verl's managers make, in a module that imports none of verl.

verl loads it as a router plugin: ``rollout.router_config_path`` names a YAML file whose
``router_class`` is this class (:func:`router_file_text`). rllm-train sets this on CPU runs,
where start-up time is most of a short run.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any

# Request ids remembered for their server: verl's own balancer keeps as many.
STICKY_REQUESTS = 10_000


class StickyLeastBusyRouter:
    """verl's load-balancer calls over ``{server_id: actor_handle}`` (a Ray actor)."""

    def __init__(self, servers: dict[str, Any], config: dict[str, Any] | None = None) -> None:
        self._servers: dict[str, Any] = dict(servers)
        self._in_flight: dict[str, int] = dict.fromkeys(servers, 0)
        self._server_of: OrderedDict[str, str] = OrderedDict()  # request id -> server, LRU
        self._sticky_limit = int((config or {}).get("sticky_requests", STICKY_REQUESTS))

    def acquire_server(self, request_id: str, **_: Any) -> tuple[str, Any]:
        server_id = self._server_of.get(request_id)
        if server_id is None or server_id not in self._in_flight:
            server_id = self._least_busy()
        self._remember(request_id, server_id)
        self._in_flight[server_id] += 1
        return server_id, self._servers[server_id]

    def release_server(self, server_id: str, request_id: str | None = None, **_: Any) -> None:
        if self._in_flight.get(server_id, 0) > 0:
            self._in_flight[server_id] -= 1

    def require_acquire_fields(self) -> list[str]:
        return []  # the request id alone

    def require_release_fields(self) -> list[str]:
        return []

    def add_servers(self, servers: dict[str, Any]) -> None:
        for server_id, handle in servers.items():
            self._servers[server_id] = handle
            self._in_flight.setdefault(server_id, 0)

    def remove_servers(self, server_ids: list[str]) -> None:
        for server_id in server_ids:
            self._servers.pop(server_id, None)
            self._in_flight.pop(server_id, None)

    def clear_sticky_cache(self) -> dict[str, Any]:
        cleared = len(self._server_of)
        self._server_of.clear()
        return {"cleared_entries": cleared, "server_loads": dict(self._in_flight)}

    def get_total_inflight(self) -> int:
        return sum(self._in_flight.values())

    def get_all_servers(self) -> list[str]:
        return list(self._in_flight)

    def _least_busy(self) -> str:
        if not self._in_flight:
            raise RuntimeError("no rollout server is registered with the load balancer")
        fewest = min(self._in_flight.values())
        return random.choice([sid for sid, count in self._in_flight.items() if count == fewest])

    def _remember(self, request_id: str, server_id: str) -> None:
        self._server_of[request_id] = server_id
        self._server_of.move_to_end(request_id)
        while len(self._server_of) > self._sticky_limit:
            self._server_of.popitem(last=False)


def router_file_text() -> str:
    """The YAML verl's ``rollout.router_config_path`` reads to use this router."""
    return f"router_class: {__name__}.{StickyLeastBusyRouter.__name__}\n"
