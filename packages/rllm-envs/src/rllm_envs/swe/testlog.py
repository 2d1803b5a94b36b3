"""Reading a test run: per-test outcomes from a JUnit XML report or from pytest's ``-rA`` log.

Both give ``{node id: status}`` with status one of ``passed``, ``failed``, ``error``,
``skipped``. Node ids are pytest's (``tests/test_x.py::TestK::test_m[1]``), so rows written
for SWE-bench (which lists such ids in FAIL_TO_PASS / PASS_TO_PASS) read the same either way.
A test reported more than once (subtests, a setup error after a pass) keeps its worst outcome.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

PASSED, FAILED, ERROR, SKIPPED, MISSING = "passed", "failed", "error", "skipped", "missing"
_RANK = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}


@dataclass(frozen=True)
class CaseOutcome:
    status: str
    message: str = ""  # the failure's message (its first lines), for problem statements


def _merge(outcomes: dict[str, CaseOutcome], node_id: str, outcome: CaseOutcome) -> None:
    known = outcomes.get(node_id)
    if known is None or _RANK[outcome.status] > _RANK[known.status]:
        outcomes[node_id] = outcome


def _dotted(file: str) -> str:
    return file.removesuffix(".py").replace("/", ".")


def junit_node_id(file: str, classname: str, name: str, files: Sequence[str] = ()) -> str:
    """pytest's node id from a JUnit ``testcase`` written with ``junit_family=xunit1``.

    ``classname`` is the node id's file, dotted, then its classes; ``file`` is where the test
    function is *defined*, which for a test inherited from a base class in another module is
    not the node id's file. So the file is the one of the run's test files (`files`) whose dotted
    form starts ``classname``, else ``file``.
    """
    owners = [
        f
        for f in (file, *files)
        if classname == _dotted(f) or classname.startswith(_dotted(f) + ".")
    ]
    if not owners:
        return f"{file}::{name}"
    owner = max(owners, key=len)  # the most specific module
    classes = classname[len(_dotted(owner)) + 1 :]
    return "::".join([owner, *(classes.split(".") if classes else []), name])


def parse_junit(text: str, files: Sequence[str] = ()) -> dict[str, CaseOutcome]:
    """Outcomes from a JUnit XML report (pytest ``--junitxml`` with ``junit_family=xunit1``);
    `files` are the test files the run was given (see :func:`junit_node_id`)."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise ValueError(f"the test report is not valid XML: {error}") from error
    outcomes: dict[str, CaseOutcome] = {}
    for case in root.iter("testcase"):
        file = case.get("file") or ""
        name = case.get("name") or ""
        classname = case.get("classname") or ""
        if not file:
            continue  # no file, no node id to match (a report of another family)
        if not classname and name == _dotted(file):
            node_id = file  # a collection error of the whole module
        else:
            node_id = junit_node_id(file, classname, name, files)
        status, message = PASSED, ""
        for child in case:
            kind = {"failure": FAILED, "error": ERROR, "skipped": SKIPPED}.get(child.tag)
            if kind and _RANK[kind] > _RANK[status]:
                status = kind
                message = child.get("message") or (child.text or "")
        _merge(outcomes, node_id, CaseOutcome(status, message.strip()[:2000]))
    return outcomes


# "PASSED tests/test_x.py::test_y", "FAILED tests/test_x.py::test_y - AssertionError: ..."
_SUMMARY_LINE = re.compile(
    r"^(?P<word>PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (?P<rest>\S.*)$", re.MULTILINE
)
_SUMMARY_STATUS = {
    "PASSED": PASSED,
    "XPASS": PASSED,
    "FAILED": FAILED,
    "ERROR": ERROR,
    "XFAIL": SKIPPED,
    "SKIPPED": SKIPPED,
}


def parse_pytest_log(text: str, files: Sequence[str] = ()) -> dict[str, CaseOutcome]:
    """Outcomes from pytest's ``-rA`` short summary (what SWE-bench's log parser reads)."""
    outcomes: dict[str, CaseOutcome] = {}
    for match in _SUMMARY_LINE.finditer(text):
        rest = match["rest"]
        if rest.startswith("["):
            continue  # "SKIPPED [1] file:line: reason" names no test
        node_id, _, message = rest.partition(" - ")
        _merge(outcomes, node_id.strip(), CaseOutcome(_SUMMARY_STATUS[match["word"]], message))
    return outcomes


@dataclass(frozen=True)
class LogParser:
    """How a test command reports: whether it writes a report file, and how to read it."""

    writes_report: bool
    read: Callable[[str, Sequence[str]], dict[str, CaseOutcome]]  # (report, test files run)
    # Appended to a test command so that it writes the report at {report}.
    report_arguments: str = ""


LOG_PARSERS: Mapping[str, LogParser] = {
    "junit": LogParser(
        writes_report=True,
        read=parse_junit,
        report_arguments="--junitxml={report} -o junit_family=xunit1",
    ),
    "pytest": LogParser(writes_report=False, read=parse_pytest_log),
}


def log_parser(name: str) -> LogParser:
    if name not in LOG_PARSERS:
        raise ValueError(f"unknown log_parser {name!r}; choose from {sorted(LOG_PARSERS)}")
    return LOG_PARSERS[name]


def file_of_test(node_id: str) -> str:
    """The file part of a node id (``tests/test_x.py::K::t[a::b]`` → ``tests/test_x.py``)."""
    return node_id.split("::", 1)[0]
