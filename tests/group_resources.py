"""Costly resources (a vLLM engine: a minute to start, gigabytes held) shared by the tests of
one group (tests/scheduling.py) and closed as soon as the group's last test ends.

A session fixture would hold them until the whole run ends, beside every test that comes
after. Here a fixture asks :class:`GroupResources` for the resource by name; the first ask
starts it, and the plugin closes everything open when the next test belongs to another group
(each group runs in one piece, on one worker). A test of another group that asks again later
starts a fresh one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.scheduling import group_of

PLUGIN_NAME = "rllm-group-resources"
# What a starter returns: the resource, and how to close it (it may assert that the close
# left nothing behind).
Started = tuple[Any, Callable[[], None]]


@dataclass(eq=False)  # a pytest plugin: registered by identity, so hashable
class GroupResources:
    """A pytest plugin holding the open resources of the group now running."""

    open: dict[str, Started] = field(default_factory=dict)

    def get(self, name: str, start: Callable[[], Started]) -> Any:
        if name not in self.open:
            self.open[name] = start()
        return self.open[name][0]

    def close_all(self) -> None:
        # The last opened first (a server engine may lean on a reference model), each closed
        # even when an earlier close fails; the first failure is raised after.
        failures = []
        while self.open:
            _, (_, close) = self.open.popitem()
            try:
                close()
            except Exception as error:  # noqa: BLE001 - raised below, after the rest closed
                failures.append(error)
        if failures:
            raise failures[0]

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        if nextitem is None or group_of(nextitem.nodeid) != group_of(item.nodeid):
            self.close_all()

    def pytest_sessionfinish(self) -> None:
        self.close_all()


def shared(request: pytest.FixtureRequest, name: str, start: Callable[[], Started]) -> Any:
    """The group's resource `name`, started by `start` on first use."""
    resources: GroupResources = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    return resources.get(name, start)
