"""Grading: the agent's diff, cleaned of test changes, tested in a fresh container.

One implementation serves the env's reward and the validation of the shipped instances:

1. the diff comes out of the agent's container (``git add -A``; ``git diff`` of every path since
   the episode's one commit, binary included);
2. paths that are tests or test configuration are dropped (:func:`is_protected_path`), so
   editing, deleting or adding tests, a ``conftest.py``, ``pytest.ini``, ``setup.cfg``,
   ``tox.ini``, ``pyproject.toml``, ``*.pth`` or ``sitecustomize`` earns nothing;
3. a fresh container of the task's image is put at the buggy state with every test file in its
   original form, the diff and the row's ``test_patch`` are applied, caches cleared;
4. the files holding FAIL_TO_PASS and PASS_TO_PASS run; the report (JUnit XML in a fresh
   folder of that container's /scratch, or the ``-rA`` log) is read and cross-checked with the
   exit code. A listed test that is missing, a collection error, an interrupted run (pytest
   exit 2-5), a timeout, or a report that contradicts the exit code resolves nothing.

``resolved`` (reward 1.0) only when every listed test passed (SWE-bench's definition).
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.swe.containers import Workspace, WorkspacePool
from rllm_envs.swe.tasks import SWETask
from rllm_envs.swe.testlog import MISSING, PASSED, CaseOutcome, log_parser

# Test configuration and interpreter start-up hooks: a change to any of them is dropped.
PROTECTED_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "setup.cfg",
        "tox.ini",
        "pyproject.toml",
        "sitecustomize.py",
        "usercustomize.py",
        "noxfile.py",
    }
)
# Folders whose whole content is tests.
TEST_DIRS = frozenset({"tests", "test", "testing"})
# Top-level modules that would shadow the test runner itself.
RUNNER_MODULES = frozenset({"pytest.py", "_pytest", "pluggy", "py.py", "pytest"})
GIT_IDENTITY = {
    "name": "rllm",
    "email": "rllm@localhost",
    "date": "2000-01-01T00:00:00+0000",
    "message": "Initial commit",
}
AGENT_PATCH, TEST_PATCH, GOLD_PATCH = "agent.patch", "test.patch", "gold.patch"


def is_protected_path(path: str, hidden: Iterable[str] = ()) -> bool:
    """Whether a change to `path` (relative to the repository) is dropped before grading."""
    pure = PurePosixPath(path)
    parts = pure.parts
    name = pure.name
    if path in set(hidden):
        return True
    if name in PROTECTED_NAMES or name.endswith((".pth", ".pyc", ".pyo")):
        return True
    if any(part in TEST_DIRS or part in ("__pycache__", ".pytest_cache") for part in parts[:-1]):
        return True
    if name.startswith("test_") and name.endswith(".py") or name.endswith("_test.py"):
        return True
    return bool(parts) and parts[0] in RUNNER_MODULES


@dataclass(frozen=True)
class AgentPatch:
    """What was taken out of the agent's container."""

    patch: str  # the diff that is graded
    dropped: tuple[str, ...] = ()  # paths whose changes were dropped
    error: str = ""  # why no diff could be taken (the agent broke its repository)


@dataclass(frozen=True)
class Grade:
    resolved: bool
    tests: dict[str, str] = field(default_factory=dict)  # node id -> status
    messages: dict[str, str] = field(default_factory=dict)  # node id -> failure message
    patch_applied: bool = True
    exit_code: int | None = None
    timed_out: bool = False
    reason: str = ""  # why not resolved, in a sentence
    log_tail: str = ""
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        passed = sum(status == PASSED for status in self.tests.values())
        return {
            "resolved": self.resolved,
            "tests_passed": passed,
            "tests_total": len(self.tests),
            "test_results": dict(self.tests),
            "patch_applied": self.patch_applied,
            "test_exit_code": self.exit_code,
            "reason": self.reason,
        }


def take_agent_patch(workspace: Workspace, task: SWETask, base_commit: str) -> AgentPatch:
    """The agent's changes since `base_commit`, with protected paths dropped."""
    env = dict(task.environment)
    reply = workspace.run_job(
        {"workdir": task.workdir, "diff_names": base_commit}, env=env, wall_seconds=60
    )
    if reply.get("error"):
        return AgentPatch("", error=_error_text(reply["error"]))
    paths = reply.get("paths", [])
    hidden = set(task.hidden_files) | set(task.test_files)
    kept = [path for path in paths if not is_protected_path(path, hidden)]
    dropped = tuple(path for path in paths if path not in kept)
    if not kept:
        return AgentPatch("", dropped)
    reply = workspace.run_job(
        {"workdir": task.workdir, "diff": {"base": base_commit, "paths": kept}},
        env=env,
        wall_seconds=60,
    )
    if reply.get("error"):
        return AgentPatch("", dropped, error=_error_text(reply["error"]))
    return AgentPatch(base64.b64decode(reply.get("patch", "")).decode("utf-8", "replace"), dropped)


def patch_paths(patch: str) -> list[str]:
    """The files a git-format diff changes (its ``diff --git a/X b/X`` headers)."""
    paths = []
    for line in patch.splitlines():
        if line.startswith("diff --git a/"):
            paths.append(line[len("diff --git a/") :].rsplit(" b/", 1)[0])
    return paths


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return f"{error.get('step')}: {error.get('message', '')}".strip()
    return str(error)


def graded_test_command(task: SWETask) -> str:
    parser = log_parser(task.log_parser)
    files = " ".join(shlex.quote(path) for path in task.test_files)
    extra = f" {parser.report_arguments}" if parser.writes_report else ""
    return f"{task.test_cmd}{extra} {files}"


def buggy_state_job(task: SWETask) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The job (and its files) that turns a fresh container into the task's buggy tree."""
    if task.image_state == "fixed":
        return {"workdir": task.workdir, "reverse": [GOLD_PATCH]}, {GOLD_PATCH: task.patch.encode()}
    return {"workdir": task.workdir}, {}


def prepare_workdir(pool: WorkspacePool, workspace: Workspace, task: SWETask) -> None:
    if not pool.owns_workdir(task.image):
        workspace.give_to_sandbox_user(task.workdir)


def run_graded_tests(
    pool: WorkspacePool,
    task: SWETask,
    patch: str,
    *,
    timeout: float,
    extra_job: dict[str, Any] | None = None,
) -> Grade:
    """Apply `patch` to a fresh buggy tree with the original tests, run the graded tests."""
    job, files = buggy_state_job(task)
    files[AGENT_PATCH] = patch.encode()
    files[TEST_PATCH] = task.test_patch.encode()
    parser = log_parser(task.log_parser)
    job.update(
        apply=[AGENT_PATCH, TEST_PATCH],
        clean=True,
        test={
            "command": graded_test_command(task),
            "timeout": timeout,
            "report": parser.writes_report,
        },
        **(extra_job or {}),
    )
    workspace = pool.take(task.image)
    try:
        prepare_workdir(pool, workspace, task)
        reply = workspace.run_job(job, files=files, env=task.environment, wall_seconds=timeout + 60)
    finally:
        workspace.remove()
    return judge(task, reply)


def judge(task: SWETask, reply: dict[str, Any]) -> Grade:
    """The grade a runner reply earns (see the module docstring for the rules)."""
    error = reply.get("error")
    if error:
        step = str(error.get("step", ""))
        if step == f"apply:{AGENT_PATCH}":
            return Grade(False, patch_applied=False, reason="the patch does not apply")
        raise InfrastructureFailure("grader", f"could not prepare the repository: {error}")
    run = reply.get("test") or {}
    exit_code = run.get("exit_code")
    parser = log_parser(task.log_parser)
    source = run.get("report") if parser.writes_report else run.get("log")
    outcomes: dict[str, CaseOutcome] = {}
    reason = ""
    if source:
        try:
            outcomes = parser.read(source, task.test_files)
        except ValueError as parse_error:
            reason = str(parse_error)
    else:
        reason = "the test run wrote no report"
    tests = {test: outcomes.get(test, CaseOutcome(MISSING)).status for test in task.graded_tests}
    messages = {test: outcomes[test].message for test in task.graded_tests if test in outcomes}
    failures = sum(outcome.status in ("failed", "error") for outcome in outcomes.values())
    if run.get("timed_out"):
        reason = "the test run timed out"
    elif exit_code not in (0, 1):
        reason = reason or f"the test run did not complete (exit code {exit_code})"
    elif exit_code == 0 and failures:
        reason = "the report shows failures but the test run exited 0"
    elif exit_code == 1 and not failures:
        reason = reason or "the test run failed but the report shows no failure"
    elif not reason:
        not_passed = [test for test, status in tests.items() if status != PASSED]
        if not_passed:
            reason = f"{len(not_passed)} of {len(tests)} graded tests did not pass"
    return Grade(
        resolved=not reason,
        tests=tests,
        messages=messages,
        exit_code=exit_code,
        timed_out=bool(run.get("timed_out")),
        reason=reason,
        log_tail=str(run.get("log", ""))[-4000:],
        seconds=float(run.get("seconds", 0.0)),
    )
