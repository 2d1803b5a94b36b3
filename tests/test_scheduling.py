"""How scripts/test.sh spreads the suite over xdist's workers (tests/scheduling.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

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
