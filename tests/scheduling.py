"""How the suite is spread over pytest-xdist's workers (``scripts/test.sh`` runs it with
``-n 2 --dist loadscope``, and the conftest puts :func:`group_scheduling` in its place).

* **Groups.** A worker runs a whole group in turn. Each module is a group of its own, so module
  fixtures start once. Two kinds of module share a group:
  - modules on one costly session fixture: a vLLM engine takes a minute to start, and a second
    worker would start a second one; the verl runs' Ray head, so that one verl run (6 GB)
    runs at a time (a module that names the fixture joins its group);
  - suites that check machine-wide state: the sandbox suite counts every process of its uid.
* **Order.** Groups go out longest first (longest-processing-time scheduling), so no worker is
  left alone with a long group at the end. The lengths come from ``durations.json``: seconds
  per module, written by any run with ``RLLM_TEST_DURATIONS`` set to its path. A module it does
  not know counts a second a test (ten a slow one).

A group is worked out from the test's id alone: xdist's main process sees ids, not tests.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DURATIONS = Path(__file__).with_name("durations.json")
DURATIONS_VARIABLE = "RLLM_TEST_DURATIONS"

# Costly fixtures, each with the group of the modules that name it: the vLLM engines
# (tests/agents/conftest.py, closed when their group ends) and the verl runs' Ray head.
SHARED_FIXTURE_GROUPS = {
    "vllm_engine": "vllm-engines",
    "vllm_server_engine": "vllm-engines",
    # The verl runs' Ray head. A verl run's processes hold about 6 GB: two at once, beside the
    # other worker's tests, cross Ray's memory limit (95%), and it kills their workers.
    "verl_ray_head": "verl-runs",
}
# Suites that check machine-wide state.
SHARED_FOLDER_GROUPS = {"tests/sandbox/": "sandbox-suite"}
UNKNOWN_TEST_SECONDS = 1.0
UNKNOWN_SLOW_TEST_SECONDS = 10.0


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@cache
def group_of_module(module: str) -> str:
    """The group of a test module (a path relative to the repository): a shared one, or its
    own path."""
    for folder, group in SHARED_FOLDER_GROUPS.items():
        if module.startswith(folder):
            return group
    try:
        source = (REPO_ROOT / module).read_text(encoding="utf-8")
    except OSError:
        return module
    for fixture, group in SHARED_FIXTURE_GROUPS.items():
        if re.search(rf"\b{fixture}\b", source):  # the name itself, not test_vllm_engine.py
            return group
    return module


def group_of(nodeid: str) -> str:
    return group_of_module(module_of(nodeid))


def group_scheduling(config: pytest.Config, log):
    """xdist's scope scheduling with :func:`group_of` as the scope: each group to one worker,
    in the order the workers collected them (longest first, see :func:`longest_first`)."""
    from xdist.scheduler import LoadScopeScheduling  # only where xdist runs the suite

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}  # no file, or one cut short: every module counts by its tests


def longest_first(items: list[pytest.Item], durations: dict[str, float]) -> list[pytest.Item]:
    """`items` with whole groups ordered by their expected seconds, longest first; the order
    inside a group (pytest's, fixture scopes considered) is kept."""
    groups = [group_of(item.nodeid) for item in items]
    seconds: dict[str, float] = {}
    counted: set[str] = set()
    first_seen: dict[str, int] = {}
    for index, (item, group) in enumerate(zip(items, groups, strict=True)):
        module = module_of(item.nodeid)
        first_seen.setdefault(group, index)
        if module in durations:
            if module not in counted:
                counted.add(module)
                seconds[group] = seconds.get(group, 0.0) + durations[module]
            continue
        slow = item.get_closest_marker("slow") is not None
        guess = UNKNOWN_SLOW_TEST_SECONDS if slow else UNKNOWN_TEST_SECONDS
        seconds[group] = seconds.get(group, 0.0) + guess

    order = sorted(range(len(items)), key=lambda i: (-seconds[groups[i]], first_seen[groups[i]]))
    return [items[i] for i in order]


@dataclass(eq=False)  # a pytest plugin: registered by identity, so hashable
class DurationRecorder:
    """A pytest plugin: seconds per module (setup, call and teardown of each test), merged into
    `path` at the end of the run; modules this run did not touch keep their old figure."""

    path: Path
    seconds: dict[str, float] = field(default_factory=dict)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = module_of(report.nodeid)
        self.seconds[module] = self.seconds.get(module, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        merged = {**load_durations(self.path), **{k: round(v, 1) for k, v in self.seconds.items()}}
        self.path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
