"""Mutate, validate, keep: how the shipped instance rows are made.

Per project:

1. **Baseline.** The whole suite runs three times on the clean tree, each in a fresh
   container; only tests that passed every time are ever used (flaky or failing ones never
   become FAIL_TO_PASS or PASS_TO_PASS).
2. **Discovery.** Each candidate mutation (``mutations.candidates``, spread over functions) is
   injected into a fresh container and the whole suite runs. FAIL_TO_PASS = baseline tests that
   no longer pass; PASS_TO_PASS = the baseline tests of the same files that still pass (as
   SWE-smith, only the files holding FAIL_TO_PASS tests are graded). A candidate is dropped when
   nothing or too much breaks, when the suite no longer collects, or when no test of those
   files still passes.
3. **Validation with the grader.** The row is graded twice by the env's own grader
   (``grading.run_graded_tests``), each in a fresh container: with the gold patch it must be
   resolved, with no patch every FAIL_TO_PASS must fail and every PASS_TO_PASS pass.

Results are cached per candidate (``$RLLM_SWE_CACHE/instances/<repo>-<version>-<seed>.jsonl``:
the verdict, the tests and their failure messages), so an interrupted run resumes where it
stopped and the rows can be written again without validating again.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_envs.sandbox.policy import SandboxPolicy
from rllm_envs.swe.builder import images
from rllm_envs.swe.builder.mutations import Mutation, candidates, file_diff, gold_patch
from rllm_envs.swe.builder.projects import Project, local_image
from rllm_envs.swe.builder.statements import Failure, write_statement
from rllm_envs.swe.containers import ContainerSettings, WorkspacePool
from rllm_envs.swe.grading import run_graded_tests
from rllm_envs.swe.tasks import DATA_DIR, to_swe_task
from rllm_envs.swe.testlog import PASSED, CaseOutcome, log_parser

# What shipped rows run: no bytecode, isolated interpreter (nothing in the repository can
# shadow pytest), no cache folder, and the project's own addopts (coverage, doctests of library
# modules) switched off so only test files run.
SHIPPED_TEST_CMD = "python3 -B -I -m pytest -p no:cacheprovider -o addopts= -rA"
BASELINE_RUNS = 3
MAX_FAIL_TO_PASS = 30
MAX_TEST_FILES = 2
MAX_PER_FUNCTION = 2
SUITE_TIMEOUT = 60.0
GRADE_TIMEOUT = 120.0
BUILD_POLICY = SandboxPolicy(
    cpu_seconds=240, wall_seconds=240, memory_mb=2048, max_processes=256, scratch_mb=256
)


@dataclass(frozen=True)
class SuiteRun:
    exit_code: int | None
    outcomes: dict[str, CaseOutcome]
    seconds: float


def _log(message: str) -> None:
    print(f"[swe-build {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def suite_files(project: Project, tree: Path) -> list[str]:
    """The test files of the suite (``test_*.py`` / ``*_test.py`` under the test paths)."""
    files = []
    for entry in project.test_paths:
        root = tree / entry
        found = [root] if root.is_file() else sorted(root.rglob("*.py"))
        files += [
            path.relative_to(tree).as_posix()
            for path in found
            if path.name.startswith("test_") or path.name.endswith("_test.py")
        ]
    return files


def run_suite(
    pool: WorkspacePool, project: Project, files: Sequence[str], mutation: Mutation | None
) -> SuiteRun:
    """The whole suite in a fresh container, with `mutation` injected when given."""
    job_files: dict[str, bytes] = {}
    job: dict[str, Any] = {"workdir": "/testbed", "clean": True}
    if mutation is not None:
        job_files["bug.patch"] = file_diff(
            mutation.path, mutation.original, mutation.mutated
        ).encode()
        job["apply"] = ["bug.patch"]
    parser = log_parser("junit")
    paths = " ".join(shlex.quote(file) for file in files)
    job["test"] = {
        "command": f"{SHIPPED_TEST_CMD} {parser.report_arguments} {paths}",
        "timeout": SUITE_TIMEOUT,
        "report": True,
    }
    workspace = pool.take(local_image(project.image))
    try:
        reply = workspace.run_job(job, files=job_files, wall_seconds=SUITE_TIMEOUT + 60)
    finally:
        workspace.remove()
    if reply.get("error"):
        raise RuntimeError(f"{project.repo}: suite job failed: {reply['error']}")
    run = reply["test"]
    report = run.get("report") or ""
    outcomes = parser.read(report, files) if report else {}
    return SuiteRun(run.get("exit_code"), outcomes, float(run.get("seconds", 0.0)))


def baseline(pool: WorkspacePool, project: Project, files: Sequence[str]) -> set[str]:
    stable: set[str] | None = None
    for _ in range(BASELINE_RUNS):
        run = run_suite(pool, project, files, None)
        passed = {test for test, outcome in run.outcomes.items() if outcome.status == PASSED}
        stable = passed if stable is None else stable & passed
    assert stable is not None
    return stable


def instance_id(project: Project, mutation: Mutation) -> str:
    digest = hashlib.sha1(gold_patch(mutation).encode()).hexdigest()[:8]
    return f"{project.repo}__{project.repo}-{digest}"


def discover(
    project: Project, mutation: Mutation, run: SuiteRun, stable: set[str]
) -> tuple[list[str], list[str]] | str:
    """(FAIL_TO_PASS, PASS_TO_PASS) for a mutant's suite run, or why it is dropped."""
    if run.exit_code != 1:
        return f"suite exit code {run.exit_code}"
    broken = sorted(
        test for test in stable if test not in run.outcomes or run.outcomes[test].status != PASSED
    )
    if not broken:
        return "no test breaks"
    if len(broken) > MAX_FAIL_TO_PASS:
        return f"{len(broken)} tests break"
    files = {test.split("::", 1)[0] for test in broken}
    if len(files) > MAX_TEST_FILES:
        return f"tests of {len(files)} files break"
    if any(test not in run.outcomes for test in broken):
        return "a test file no longer collects"
    still = sorted(
        test for test in stable if test.split("::", 1)[0] in files and test not in broken
    )
    if not still:
        return "no PASS_TO_PASS test"
    return broken, still


def make_row(
    project: Project,
    mutation: Mutation,
    snapshot: str,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    messages: dict[str, str],
) -> dict[str, Any]:
    identifier = instance_id(project, mutation)
    failures = [Failure(test, messages.get(test, "")) for test in fail_to_pass]
    return {
        "instance_id": identifier,
        "repo": project.repo,
        "version": project.version,
        "base": snapshot,
        "image_name": project.image,
        "image_state": "fixed",
        "patch": gold_patch(mutation),
        "test_patch": "",
        "FAIL_TO_PASS": fail_to_pass,
        "PASS_TO_PASS": pass_to_pass,
        "problem_statement": write_statement(
            instance_id=identifier,
            project=project.name,
            version=project.version,
            module=mutation.module,
            function=mutation.function,
            failures=failures,
        ),
        "workdir": "/testbed",
        "test_cmd": SHIPPED_TEST_CMD,
        "log_parser": "junit",
        "mutation": {
            "operator": mutation.operator,
            "module": mutation.module,
            "function": mutation.function,
        },
        "split": project.split,
    }


def validate(pool: WorkspacePool, row: dict[str, Any]) -> str | None:
    """Why the grader rejects the row (gold must resolve, no patch must not), or None."""
    task = to_swe_task(row)
    gold = run_graded_tests(pool, task, task.patch, timeout=GRADE_TIMEOUT)
    if not gold.resolved:
        return f"gold patch not resolved: {gold.reason}"
    nothing = run_graded_tests(pool, task, "", timeout=GRADE_TIMEOUT)
    if nothing.resolved:
        return "resolved without a patch"
    wrong = [t for t in task.fail_to_pass if nothing.tests.get(t) == PASSED]
    wrong += [t for t in task.pass_to_pass if nothing.tests.get(t) != PASSED]
    if wrong:
        return f"tests do not behave as discovered without a patch: {wrong[:3]}"
    return None


class _Progress:
    """The per-candidate results of a project, on disk (for resuming)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.done: dict[str, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    entry = json.loads(line)
                    self.done[entry["key"]] = entry

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.done[entry["key"]] = entry
            with self.path.open("a") as handle:
                handle.write(json.dumps(entry) + "\n")


def project_instances(project: Project, per_project: int, seed: int) -> list[dict[str, Any]]:
    cache = images.cache_dir()
    tools = images.tools_python(cache)
    progress = _Progress(cache / "instances" / f"{project.repo}-{project.version}-{seed}.jsonl")
    progress.path.parent.mkdir(parents=True, exist_ok=True)
    pool = WorkspacePool(ContainerSettings(BUILD_POLICY), spares=2)
    try:
        snapshot = pool.image_labels(project.image).get(images.BASE_LABEL, "")
        sdist = images.download_sdist(project.sdist, cache, tools)
        with tempfile.TemporaryDirectory(prefix="rllm-swe-mutate-") as folder:
            tree = images.unpack_sdist(sdist, Path(folder))
            ordered = candidates(project, tree, seed)
            files = suite_files(project, tree)
        stable = baseline(pool, project, files)
        _log(f"{project.repo}: {len(ordered)} candidates, {len(stable)} stable tests")
        rows: list[dict[str, Any]] = []
        per_function: dict[str, int] = {}
        for mutation in ordered:
            if len(rows) >= per_project:
                break
            function_key = f"{mutation.path}:{mutation.function}"
            if per_function.get(function_key, 0) >= MAX_PER_FUNCTION:
                continue
            entry = progress.done.get(mutation.key + ":" + instance_id(project, mutation))
            if entry is None:
                entry = _try(pool, project, files, mutation, snapshot, stable)
                progress.record(entry)
            if "fail_to_pass" in entry:
                rows.append(
                    make_row(
                        project,
                        mutation,
                        snapshot,
                        entry["fail_to_pass"],
                        entry["pass_to_pass"],
                        entry["messages"],
                    )
                )
                per_function[function_key] = per_function.get(function_key, 0) + 1
                _log(f"{project.repo}: kept {len(rows)}/{per_project} ({mutation.operator})")
        return rows
    finally:
        pool.close()


def _try(
    pool: WorkspacePool,
    project: Project,
    files: Sequence[str],
    mutation: Mutation,
    snapshot: str,
    stable: set[str],
) -> dict[str, Any]:
    key = mutation.key + ":" + instance_id(project, mutation)
    run = run_suite(pool, project, files, mutation)
    found = discover(project, mutation, run, stable)
    if isinstance(found, str):
        return {"key": key, "dropped": found}
    fail_to_pass, pass_to_pass = found
    messages = {test: run.outcomes[test].message for test in fail_to_pass}
    row = make_row(project, mutation, snapshot, fail_to_pass, pass_to_pass, messages)
    problem = validate(pool, row)
    if problem:
        return {"key": key, "dropped": problem}
    # What the row is made from, not the row: statements and layout can change without
    # validating again.
    return {
        "key": key,
        "fail_to_pass": fail_to_pass,
        "pass_to_pass": pass_to_pass,
        "messages": messages,
    }


def write_rows(
    rows: Sequence[dict[str, Any]], output: Path, projects: Sequence[Project]
) -> dict[str, int]:
    """Write the split files; rows of projects not rebuilt this time are kept as they were."""
    output.mkdir(parents=True, exist_ok=True)
    rebuilt = {project.repo for project in projects}
    counts: dict[str, int] = {}
    for split in ("train", "test"):
        path = output / f"{split}.jsonl"
        kept = (
            []
            if not path.exists()
            else [
                dict(json.loads(line), split=split)
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line)["repo"] not in rebuilt
            ]
        )
        chosen = sorted(
            (row for row in [*kept, *rows] if row["split"] == split),
            key=lambda r: r["instance_id"],
        )
        with path.open("w", encoding="utf-8") as handle:
            for row in chosen:
                shipped = {key: value for key, value in row.items() if key != "split"}
                handle.write(json.dumps(shipped, ensure_ascii=False) + "\n")
        counts[split] = len(chosen)
    return counts


def run_pipeline(
    projects: Sequence[Project],
    *,
    per_project: int,
    seed: int,
    output: str | None,
    workers: int,
) -> int:
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as executor:
        results = list(
            executor.map(lambda project: project_instances(project, per_project, seed), projects)
        )
    rows = [row for project_rows in results for row in project_rows]
    for project, project_rows in zip(projects, results, strict=True):
        _log(f"{project.repo} ({project.split}): {len(project_rows)} instances")
    counts = write_rows(rows, Path(output) if output else DATA_DIR, projects)
    _log(f"wrote {counts} in {time.monotonic() - started:.0f} s")
    return 0
