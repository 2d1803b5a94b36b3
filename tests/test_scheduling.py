"""How scripts/test.sh spreads the suite over xdist's workers (tests/scheduling.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.scheduling import DurationRecorder, group_of, group_of_module, longest_first


def test_tests_on_a_costly_session_fixture_share_one_group():
    # Both vLLM session fixtures: one worker starts each engine once.
    assert group_of("tests/agents/engines/test_vllm_engine.py::test_x") == "vllm-engines"
    assert group_of("tests/agents/engines/test_vllm_server.py::test_y[a]") == "vllm-engines"
    # A module that asks for the fixture by name at run time joins too.
    assert group_of_module("tests/agents/engines/test_engine_conformance.py") == "vllm-engines"


def test_the_sandbox_suite_is_one_group_and_other_modules_their_own():
    assert group_of("tests/sandbox/test_escape.py::test_fork_bomb[docker]") == "sandbox-suite"
    assert group_of("tests/sandbox/test_backends.py::test_z") == "sandbox-suite"
    assert group_of("tests/envs/test_math.py::test_a") == "tests/envs/test_math.py"
    assert group_of("tests/no_such_module.py::test_a") == "tests/no_such_module.py"


def fake_item(nodeid: str, slow: bool = False):
    return SimpleNamespace(
        nodeid=nodeid, get_closest_marker=lambda name: object() if slow and name == "slow" else None
    )


def test_groups_go_out_longest_first_and_keep_their_inner_order():
    items = [
        fake_item("tests/a.py::one"),
        fake_item("tests/b.py::one"),
        fake_item("tests/a.py::two"),
        fake_item("tests/c.py::one", slow=True),  # unknown: a slow test counts 10 s
        fake_item("tests/b.py::two"),
    ]
    durations = {"tests/a.py": 5.0, "tests/b.py": 50.0}
    ordered = [item.nodeid for item in longest_first(items, durations)]
    assert ordered == [
        "tests/b.py::one",
        "tests/b.py::two",
        "tests/c.py::one",
        "tests/a.py::one",
        "tests/a.py::two",
    ]


def test_recorded_durations_merge_into_the_file(tmp_path):
    path = tmp_path / "durations.json"
    path.write_text(json.dumps({"tests/old.py": 3.0, "tests/a.py": 1.0}))
    recorder = DurationRecorder(path)
    for nodeid, seconds in (("tests/a.py::one", 2.0), ("tests/a.py::two", 0.5)):
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=seconds))
    recorder.pytest_sessionfinish()
    assert json.loads(path.read_text()) == {"tests/a.py": 2.5, "tests/old.py": 3.0}


def test_a_groups_resources_close_when_its_last_test_ends_and_restart_if_asked_again():
    from tests.group_resources import GroupResources

    events = []

    def start():
        events.append("start")
        return "engine", lambda: events.append("close")

    resources = GroupResources()
    a1, a2 = (fake_item(f"tests/agents/engines/test_vllm_engine.py::t{n}") for n in (1, 2))
    b1 = fake_item("tests/envs/test_math.py::t")
    assert resources.get("vllm_engine", start) == "engine"
    resources.pytest_runtest_teardown(a1, nextitem=a2)  # same group: kept open
    assert resources.get("vllm_engine", start) == "engine" and events == ["start"]
    resources.pytest_runtest_teardown(a2, nextitem=b1)  # the group's last test: closed
    assert events == ["start", "close"]
    resources.get("vllm_engine", start)  # asked again later: a fresh one
    resources.pytest_sessionfinish()
    assert events == ["start", "close", "start", "close"]


def test_every_resource_is_closed_even_when_one_close_fails():
    from tests.group_resources import GroupResources

    closed = []

    def failing():
        raise AssertionError("a process outlived close()")

    resources = GroupResources()
    resources.get("first", lambda: (1, lambda: closed.append("first")))
    resources.get("second", lambda: (2, failing))
    with pytest.raises(AssertionError, match="outlived"):
        resources.close_all()
    assert closed == ["first"] and resources.open == {}
