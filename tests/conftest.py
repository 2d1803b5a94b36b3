"""Shared test fixtures (see tests/parts.py for tests that need real system parts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.group_resources import PLUGIN_NAME as GROUP_RESOURCES
from tests.group_resources import GroupResources
from tests.memory import note_memory, release_if_grown
from tests.scheduling import (
    DURATIONS_VARIABLE,
    DurationRecorder,
    group_scheduling,
    load_durations,
    longest_first,
)


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    # Never touch the user's caches or reach a hub from tests.
    monkeypatch.setenv("RLLM_DATASETS_DIR", str(tmp_path_factory.mktemp("datasets")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    note_memory(item)  # before the test's fixtures are set up


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    # Last: after pytest's own teardown has run the test's fixture finalizers (tests/memory.py
    # says why).
    release_if_grown(item)


# -- spreading the suite over pytest-xdist's workers (tests/scheduling.py) -------------------
@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a run without xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadscope":
        return group_scheduling(config, log)
    return None  # any other mode as xdist has it


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    # After pytest ordered the tests by fixture scope, before a worker sends the order on. In
    # one process too: each group then runs in one piece, so its resources start once.
    session.items[:] = longest_first(session.items, load_durations())


def pytest_configure(config):
    config.pluginmanager.register(GroupResources(), GROUP_RESOURCES)
    path = os.environ.get(DURATIONS_VARIABLE)
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):  # workers' reports reach the main one
        config.pluginmanager.register(DurationRecorder(Path(path)), "rllm-test-durations")
