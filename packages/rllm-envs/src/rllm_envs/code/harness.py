"""Grading a solution: each test is its own sandboxed run, judged on the host.

Why this shape (reward integrity): the sandbox of a run holds only the solution and the input
of that one test. Expected outputs, the other tests and this harness stay on the host, so the
code cannot read, overwrite or patch them, and the verdict is the host comparing what came out
(`compare.py`), not anything the code can write, exit with or print as a pattern. A run that
exits early, times out or floods its output simply fails its test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from rllm_envs.code.compare import function_result_matches, stdout_matches
from rllm_envs.sandbox.execution import ExecutionRequest, ExecutionResult, Sandbox


@dataclass(frozen=True)
class TestOutcome:
    __test__ = False  # not a pytest test class

    passed: bool
    status: str  # passed, wrong_answer, error, timeout, output_limit
    output: str  # what the program printed (clipped), for feedback on public tests
    error: str  # the tail of stderr, for feedback on public tests


@dataclass(frozen=True)
class TestReport:
    __test__ = False  # not a pytest test class

    outcomes: tuple[TestOutcome, ...]
    total: int  # tests in the set, including any not run after a first failure

    @property
    def passed(self) -> int:
        return sum(outcome.passed for outcome in self.outcomes)

    @property
    def all_passed(self) -> bool:
        return self.passed == self.total

    def status_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(outcome.status for outcome in self.outcomes).items()))


def _runner_source() -> bytes:
    return resources.files("rllm_envs.code").joinpath("runner.py").read_bytes()


# How every test starts Python: without `site` (see runner.py for why and what it restores).
PYTHON = ("python3", "-S", "runner.py")


def request_for_test(
    task: Mapping[str, Any], code: str, test: Mapping[str, Any]
) -> ExecutionRequest:
    """The sandboxed run of one test: only the solution and this test's input go in."""
    if task["style"] == "stdio":
        preamble = task.get("preamble") or ""
        # No line before the code unless there is a preamble: tracebacks then name the
        # model's own line numbers.
        solution = f"{preamble}\n{code}" if preamble else code
        return ExecutionRequest(
            (*PYTHON, "stdio"),
            files={"runner.py": _runner_source(), "solution.py": solution.encode()},
            stdin=str(test["input"]).encode(),
        )
    return ExecutionRequest(
        (*PYTHON, "function", task["entry_point"]),
        files={
            "runner.py": _runner_source(),
            "preamble.py": (task.get("preamble") or "").encode(),
            "solution.py": code.encode(),
        },
        stdin=str(test["args"]).encode(),
    )


def _clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[: limit - 20] + "\n[... clipped]"


def judge(task: Mapping[str, Any], test: Mapping[str, Any], result: ExecutionResult) -> TestOutcome:
    if result.timed_out or result.output_truncated:
        passed, status = False, result.status
    elif result.exit_code != 0:
        passed, status = False, "error"
    elif task["style"] == "stdio":
        passed = stdout_matches(result.stdout, str(test["output"]))
        status = "passed" if passed else "wrong_answer"
    else:
        passed = function_result_matches(result.stdout, test)
        status = "passed" if passed else "wrong_answer"
    return TestOutcome(passed, status, _clip(result.stdout), _clip(result.stderr[-2000:]))


def run_tests(
    sandbox: Sandbox,
    task: Mapping[str, Any],
    code: str,
    tests: Sequence[Mapping[str, Any]],
    *,
    stop_at_first_failure: bool = False,
) -> TestReport:
    outcomes = []
    for test in tests:
        outcome = judge(task, test, sandbox.run(request_for_test(task, code, test)))
        outcomes.append(outcome)
        if stop_at_first_failure and not outcome.passed:
            break
    return TestReport(tuple(outcomes), len(tests))
