"""rllm/SWE-v0 without containers: action grammar, test reports, grading rules, task rows,
mutations, problem statements and the shipped sets."""

from __future__ import annotations

import ast
import collections
import difflib
import json

import pytest
from rllm_envs.swe.actions import MAX_CALLS_PER_TURN, TOOL_SCHEMAS, parse_swe_action
from rllm_envs.swe.builder.mutations import OPERATORS, Mutation, file_diff, module_mutations
from rllm_envs.swe.builder.projects import PROJECTS
from rllm_envs.swe.builder.statements import Failure, subject_of, write_statement
from rllm_envs.swe.env import clip_middle
from rllm_envs.swe.grading import is_protected_path, judge, patch_paths
from rllm_envs.swe.tasks import (
    SHIPPED_SETS,
    TaskRowError,
    load_swe_tasks,
    swebench_image_name,
    to_swe_task,
)
from rllm_envs.swe.testlog import junit_node_id, parse_junit, parse_pytest_log

ROW = {
    "instance_id": "demo__demo-1",
    "problem_statement": "add() is wrong",
    "FAIL_TO_PASS": ["tests/test_a.py::test_add"],
    "PASS_TO_PASS": ["tests/test_a.py::test_sub", "tests/test_b.py::K::test_c[1-2]"],
    "image_name": "demo:1",
}


# -- action grammar -----------------------------------------------------------------------
def test_tool_calls_and_bash_blocks_parse_into_calls():
    text = (
        '<tool_call>{"name": "view", "arguments": {"path": "a.py", "start_line": 2}}</tool_call>'
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    )
    parsed = parse_swe_action(text)
    assert parsed.error is None
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("view", {"path": "a.py", "start_line": 2}),
        ("bash", {"command": "ls"}),
    ]
    openai = json.dumps({"tool_calls": [{"function": {"name": "submit", "arguments": "{}"}}]})
    assert [c.name for c in parse_swe_action(openai).calls] == ["submit"]
    block = parse_swe_action("I will look.\n```bash\ngrep -rn foo .\n```\n")
    assert block.from_bash_block and block.calls[0].arguments == {"command": "grep -rn foo ."}
    assert parse_swe_action("```bash\nsubmit\n```").calls[0].name == "submit"
    assert parse_swe_action("<think>```bash\nrm x\n```</think>```bash\nls\n```").calls[
        0
    ].arguments == {"command": "ls"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("just prose", "no tool call"),
        ("```bash\nls\n```\n```bash\npwd\n```", "2 ```bash``` blocks"),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool 'rm'"),
        ('<tool_call>{"name": "bash", "arguments": {}}</tool_call>', "missing argument"),
        ('<tool_call>{"name": "view", "arguments": {"path": 3}}</tool_call>', "must be a string"),
        (
            '<tool_call>{"name": "view", "arguments": {"path": "a", "start_line": true}}'
            "</tool_call>",
            "must be a integer",
        ),
        (
            '<tool_call>{"name": "bash", "arguments": {"command": "ls", "cwd": "/"}}</tool_call>',
            "unknown argument",
        ),
        ("<tool_call>{not json</tool_call>", "invalid tool call"),
        (
            '<tool_call>{"name": "submit", "arguments": {}}</tool_call>' * (MAX_CALLS_PER_TURN + 1),
            "the limit is",
        ),
    ],
)
def test_malformed_actions_say_what_is_wrong(text, says):
    parsed = parse_swe_action(text)
    assert not parsed.calls and says in parsed.error


def test_tool_schemas_are_openai_functions():
    names = [schema["function"]["name"] for schema in TOOL_SCHEMAS]
    assert names == ["bash", "view", "str_replace", "create", "search", "submit"]
    for schema in TOOL_SCHEMAS:
        parameters = schema["function"]["parameters"]
        assert schema["type"] == "function" and parameters["type"] == "object"
        assert set(parameters["required"]) <= set(parameters["properties"])


def test_long_output_keeps_its_start_and_end():
    text = "a" * 100 + "MIDDLE" + "z" * 100
    clipped = clip_middle(text, 50)
    assert clipped.startswith("a" * 25) and clipped.endswith("z" * 25)
    assert "[... 156 characters of output cut ...]" in clipped
    assert clip_middle("short", 50) == "short"


# -- test reports ---------------------------------------------------------------------------
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_add" file="tests/test_a.py" line="1"/>
<testcase classname="tests.test_a" name="test_sub" file="tests/test_a.py" line="4">
  <failure message="AssertionError: assert 1 == 2">trace</failure></testcase>
<testcase classname="tests.test_b.K" name="test_c[1-2]" file="tests/test_b.py" line="9"/>
<testcase classname="tests.test_b.K" name="test_c[1-2]" file="tests/test_b.py" line="9">
  <failure message="contains 1 failed subtest"/></testcase>
<testcase classname="tests.test_b" name="test_skip" file="tests/test_b.py" line="12">
  <skipped message="no"/></testcase>
<testcase classname="tests.test_d.LRUTest" name="test_inherited" file="tests/__init__.py"/>
<testcase classname="" name="tests.test_c" file="tests/test_c.py">
  <error message="collection failure"/></testcase>
</testsuite></testsuites>"""


def test_junit_reports_give_pytest_node_ids_and_the_worst_outcome():
    # A test inherited from a base class in tests/__init__.py: its node id is the file it ran in.
    outcomes = parse_junit(JUNIT, ["tests/test_a.py", "tests/test_d.py"])
    assert {test: outcome.status for test, outcome in outcomes.items()} == {
        "tests/test_d.py::LRUTest::test_inherited": "passed",
        "tests/test_a.py::test_add": "passed",
        "tests/test_a.py::test_sub": "failed",
        "tests/test_b.py::K::test_c[1-2]": "failed",
        "tests/test_b.py::test_skip": "skipped",
        "tests/test_c.py": "error",
    }
    assert outcomes["tests/test_a.py::test_sub"].message == "AssertionError: assert 1 == 2"
    assert junit_node_id("pkg/tests/t.py", "pkg.tests.t.A.B", "x") == "pkg/tests/t.py::A::B::x"
    with pytest.raises(ValueError, match="not valid XML"):
        parse_junit("<testsuites>")


def test_pytest_summary_lines_give_node_ids():
    log = (
        "PASSED tests/test_a.py::test_add\n"
        "FAILED tests/test_a.py::test_sub - AssertionError: x - y\n"
        "SKIPPED [1] tests/test_a.py:3: no reason\n"
        "XFAIL tests/test_a.py::test_x\n"
        "ERROR tests/test_b.py::test_e - fixture\n"
        "   PASSED not at the start of a line\n"
    )
    outcomes = parse_pytest_log(log)
    assert {test: outcome.status for test, outcome in outcomes.items()} == {
        "tests/test_a.py::test_add": "passed",
        "tests/test_a.py::test_sub": "failed",
        "tests/test_a.py::test_x": "skipped",
        "tests/test_b.py::test_e": "error",
    }


# -- grading rules --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "conftest.py",
        "pkg/conftest.py",
        "pytest.ini",
        "setup.cfg",
        "tox.ini",
        "pyproject.toml",
        "sitecustomize.py",
        "pkg/usercustomize.py",
        "evil.pth",
        "tests/test_a.py",
        "tests/helpers.py",
        "pkg/tests/data.json",
        "test/x.py",
        "test_inflection.py",
        "pkg/mod_test.py",
        "pytest.py",
        "_pytest/runner.py",
        "pkg/__pycache__/m.cpython-311.pyc",
    ],
)
def test_test_files_and_configuration_are_protected(path):
    assert is_protected_path(path)


@pytest.mark.parametrize("path", ["pkg/core.py", "README.rst", "pkg/testing_utils.py", "x.txt"])
def test_library_files_are_graded(path):
    assert not is_protected_path(path)
    assert is_protected_path(path, hidden=[path])


def _reply(exit_code, report=None, timed_out=False):
    return {"test": {"exit_code": exit_code, "report": report, "timed_out": timed_out}}


def _report(statuses):
    cases = []
    for test, status in statuses.items():
        file, _, name = test.partition("::")
        module = file.removesuffix(".py").replace("/", ".")
        child = {"passed": "", "failed": "<failure message='x'/>"}[status]
        cases.append(
            f'<testcase classname="{module}" name="{name}" file="{file}">{child}</testcase>'
        )
    return f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>"


def test_judge_resolves_only_when_every_listed_test_passed_and_the_exit_code_agrees():
    row = dict(ROW, PASS_TO_PASS=["tests/test_a.py::test_sub"])
    task = to_swe_task(row)
    all_passed = _report(
        {"tests/test_a.py::test_add": "passed", "tests/test_a.py::test_sub": "passed"}
    )
    assert judge(task, _reply(0, all_passed)).resolved
    one_failed = _report(
        {"tests/test_a.py::test_add": "failed", "tests/test_a.py::test_sub": "passed"}
    )
    grade = judge(task, _reply(1, one_failed))
    assert not grade.resolved and grade.tests["tests/test_a.py::test_add"] == "failed"
    missing = _report({"tests/test_a.py::test_sub": "passed"})
    grade = judge(task, _reply(0, missing))
    assert not grade.resolved and grade.tests["tests/test_a.py::test_add"] == "missing"
    # A report that contradicts the exit code, an interrupted run, a timeout, no report.
    assert "exited 0" in judge(task, _reply(0, one_failed)).reason
    assert "no failure" in judge(task, _reply(1, all_passed)).reason
    assert "exit code 2" in judge(task, _reply(2, all_passed)).reason
    assert "exit code 5" in judge(task, _reply(5, all_passed)).reason
    assert "timed out" in judge(task, _reply(None, all_passed, timed_out=True)).reason
    assert "no report" in judge(task, _reply(0, None)).reason
    assert not judge(task, {"error": {"step": "apply:agent.patch", "message": "x"}}).patch_applied


def test_patch_paths_reads_git_headers():
    patch = file_diff("pkg/a b.py", "x = 1\n", "x = 2\n") + file_diff("pkg/c.py", "y\n", "z\n")
    assert patch_paths(patch) == ["pkg/a b.py", "pkg/c.py"]


# -- task rows ------------------------------------------------------------------------------
def test_swebench_rows_read_with_defaults():
    row = {
        "instance_id": "astropy__astropy-12907",
        "problem_statement": "bug",
        "FAIL_TO_PASS": json.dumps(["astropy/tests/test_x.py::test_a"]),
        "PASS_TO_PASS": "[]",
        "patch": "diff",
        "test_patch": "diff --git a/astropy/tests/test_x.py b/astropy/tests/test_x.py",
    }
    task = to_swe_task(row)
    assert task.image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert task.image == swebench_image_name(row["instance_id"])
    assert (task.workdir, task.image_state, task.log_parser) == ("/testbed", "base", "junit")
    assert task.fail_to_pass == ("astropy/tests/test_x.py::test_a",) and task.pass_to_pass == ()
    assert task.hidden_files == ("astropy/tests/test_x.py",)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"FAIL_TO_PASS": []}, "missing column"),
        ({"FAIL_TO_PASS": "not json"}, "not a JSON list"),
        ({"FAIL_TO_PASS": [1]}, "list of test ids"),
        ({"image_state": "dirty"}, "image_state"),
        ({"image_state": "fixed"}, "needs the gold 'patch'"),
        ({"log_parser": "tap"}, "unknown log_parser"),
        ({"workdir": "relative"}, "absolute path"),
    ],
)
def test_bad_rows_are_refused_with_the_reason(change, says):
    with pytest.raises(TaskRowError, match=says):
        to_swe_task(dict(ROW, **change))


def test_task_sources_are_checked_when_loaded(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROW) + "\n" + json.dumps(dict(ROW, FAIL_TO_PASS=[])) + "\n")
    with pytest.raises(TaskRowError, match="missing column"):
        load_swe_tasks(str(path), "train")
    assert len(load_swe_tasks([ROW], "train")) == 1


# -- how the shipped tasks were made --------------------------------------------------------
SOURCE = '''\
def window(seq, n=2, strict=True):
    """Doc: if x < 3 and y."""
    out = []
    for i in range(len(seq) - n + 1):
        if i < 0 and strict:
            raise ValueError("bad")  # keep
        out.append(tuple(seq[i : i + n]))
    if not out:
        return pad(seq, n)
    return out
'''


def test_mutations_are_one_precise_edit_that_keeps_the_file_parsing():
    mutations = module_mutations("pkg/m.py", "pkg.m", SOURCE)
    operators = collections.Counter(m.operator for m in mutations)
    assert set(operators) == set(OPERATORS)
    for mutation in mutations:
        ast.parse(mutation.mutated)
        matcher = difflib.SequenceMatcher(
            None, SOURCE.splitlines(), mutation.mutated.splitlines(), autojunk=False
        )
        edits = [op for op in matcher.get_opcodes() if op[0] != "equal"]
        assert len(edits) == 1, mutation  # one contiguous edit, the rest byte for byte
        assert '"""Doc: if x < 3 and y."""' in mutation.mutated  # docstrings are left alone
    mutated = {m.mutated for m in mutations}
    assert SOURCE.replace("i < 0 and", "i <= 0 and") in mutated
    assert SOURCE.replace("i < 0 and strict", "i < 0 or strict") in mutated
    assert SOURCE.replace("len(seq) - n + 1", "len(seq) + n + 1") in mutated
    assert SOURCE.replace("strict=True", "strict=False") in mutated
    assert SOURCE.replace("pad(seq, n)", "pad(n, seq)") in mutated
    assert SOURCE.replace("if not out:", "if out:") in mutated
    removed = '        if i < 0 and strict:\n            raise ValueError("bad")  # keep\n'
    assert SOURCE.replace(removed, "") in mutated


def test_gold_patch_is_the_mutant_back_to_the_original():
    mutation = Mutation("pkg/m.py", "f", "pkg.m", "x", 1, "a = 1\nb = 2\n", "a = 1\nb = 3\n")
    patch = file_diff(mutation.path, mutation.mutated, mutation.original)
    assert patch.startswith("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n")
    assert "-b = 3\n+b = 2\n" in patch


def test_problem_statements_describe_behaviour_not_the_diff():
    failures = [
        Failure("tests/test_a.py::TestK::test_window[3]", "AssertionError: assert [1] == [1, 2]"),
        Failure("tests/test_a.py::test_pad", "AssertionError: assert 0 == 1"),
    ]
    text = write_statement(
        instance_id="demo__demo-1",
        project="demo",
        version="1.0",
        module="demo.seq",
        function="window",
        failures=failures,
    )
    assert "`demo.seq.window`" in text and "assert [1] == [1, 2]" in text
    assert "`TestK.test_window[3]`" in text and "tests/test_a.py" not in text
    raising = write_statement(
        instance_id="demo__demo-2",
        project="demo",
        version="1.0",
        module="demo.seq",
        function="_helper",
        failures=[Failure("t.py::test_x", "TypeError: unsupported operand")],
    )
    assert "`TypeError`" in raising and "the `demo.seq` module" in raising
    assert "_helper" not in raising
    assert subject_of("m", "Version.__lt__") == "`m.Version`"
    assert subject_of("m", "Version.bump") == "`m.Version.bump`"


def test_shipped_sets_follow_the_issue():
    rows = {
        split: [json.loads(line) for line in path.read_text().splitlines()]
        for split, path in SHIPPED_SETS.items()
    }
    all_rows = rows["train"] + rows["test"]
    assert len(all_rows) >= 200
    projects = {row["repo"] for row in all_rows}
    assert len(projects) >= 8
    # Split by project: no project has rows in both splits.
    assert not {r["repo"] for r in rows["train"]} & {r["repo"] for r in rows["test"]}
    expected = {project.repo: project.split for project in PROJECTS}
    assert all(expected[row["repo"]] == split for split in rows for row in rows[split])
    assert len({row["instance_id"] for row in all_rows}) == len(all_rows)
    for row in all_rows:
        task = to_swe_task(row)
        assert task.image_state == "fixed" and task.base and row["version"]
        assert task.fail_to_pass and task.pass_to_pass
        assert not set(task.fail_to_pass) & set(task.pass_to_pass)
        assert set(task.test_files) == set(task.hidden_files)  # P2P only in the F2P files
        fixed_lines = [
            line[1:].strip()
            for line in task.patch.splitlines()
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
        ]
        for line in fixed_lines:
            if len(line) > 12:  # the statement never quotes the changed code
                assert line not in task.problem_statement, row["instance_id"]
        assert not any(is_protected_path(path) for path in patch_paths(task.patch))
