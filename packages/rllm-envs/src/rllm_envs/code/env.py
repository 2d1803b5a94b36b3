"""`CodeEnv`: program synthesis graded by unit tests in a sandbox (contract in __init__.py)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rllm_envs.code.formats import TaskFormatError, to_code_task
from rllm_envs.code.harness import TestReport, run_tests
from rllm_envs.code.shipped import SHIPPED_SETS
from rllm_envs.core.tasks import Row, TaskSet, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_envs.sandbox import SandboxPolicy, make_sandbox

# ```python ... ``` (any info string, or none); the last block in the reply is the answer.
_CODE_BLOCK = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
DEFAULT_POLICY = SandboxPolicy(cpu_seconds=5, wall_seconds=6, memory_mb=512)

_STYLE_INSTRUCTIONS = {
    "function": (
        "Write a Python function `{entry_point}` that solves the task. Reply with the complete "
        "code (imports and helpers included) in a ```python code block; the last code block "
        "in your reply is run."
    ),
    "stdio": (
        "Write a Python program that reads standard input and writes the answer to standard "
        "output. Reply with the complete program in a ```python code block; the last code "
        "block in your reply is run."
    ),
}

# How a reply earns its reward: all hidden tests, or the share of them that pass.
REWARD_MODES = ("all", "fraction")


def last_code_block(text: str) -> str | None:
    blocks = _CODE_BLOCK.findall(text)
    return blocks[-1] if blocks else None


def shipped_tasks() -> TaskSet:
    # Each shipped set is parsed once per process (TaskSources caches it); joining them is cheap.
    sources = TaskSources(shipped=SHIPPED_SETS)
    rows = tuple(row for name in SHIPPED_SETS for row in sources.load(f"shipped:{name}").rows)
    return TaskSet("shipped:all", rows)


def load_code_tasks(
    tasks: str | Sequence[Row] | TaskSet | None,
    split: str,
    column_map: Mapping[str, str] | None,
) -> TaskSet:
    if tasks is None or tasks == "shipped:all":
        return shipped_tasks()
    return TaskSources(shipped=SHIPPED_SETS).load(tasks, split=split, column_map=column_map)


def _failing_public_tests(task: Row, report: TestReport) -> str:
    lines = []
    for test, outcome in zip(task["public_tests"], report.outcomes, strict=False):
        if outcome.passed:
            continue
        given = test.get("input") if task["style"] == "stdio" else f"arguments {test['args']}"
        wanted = test.get("output") if task["style"] == "stdio" else test["expected"]
        lines.append(f"- input: {given!r}\n  expected: {wanted!r}\n  result: {outcome.status}")
        if outcome.output:
            lines.append(f"  your output: {outcome.output!r}")
        if outcome.error and outcome.status == "error":
            lines.append(f"  error: {outcome.error.strip().splitlines()[-1]!r}")
    return "\n".join(lines)


class CodeEnv(TextEnv):
    """Program synthesis with unit tests, run in a sandbox (see the package docstring)."""

    def __init__(
        self,
        tasks: str | Sequence[Row] | TaskSet | None = None,
        *,
        backend: str = "bwrap",
        policy: SandboxPolicy | Mapping[str, Any] | None = None,
        sandbox_options: Mapping[str, Any] | None = None,
        max_turns: int = 1,
        reward_mode: str = "all",
        split: str = "train",
        column_map: Mapping[str, str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        super().__init__(
            load_code_tasks(tasks, split, column_map), max_turns=max_turns, render_mode=render_mode
        )
        if isinstance(policy, Mapping):
            policy = SandboxPolicy(**policy)
        self.reward_mode = reward_mode
        self.backend = backend
        self.sandbox = make_sandbox(
            backend, policy or DEFAULT_POLICY, **dict(sandbox_options or {})
        )
        self.sandbox_description = self.sandbox.describe()
        self.code_task: Row | None = None

    def task_name(self) -> str:
        return "code"

    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        try:
            self.code_task = to_code_task(task)
        except TaskFormatError as error:
            raise ValueError(f"rllm/Code-v0 cannot use this task: {error}") from error
        code_task = self.code_task
        if code_task.get("task_id") and not any(key in task for key in ("task_id", "id", "uid")):
            task["task_id"] = code_task["task_id"]  # e.g. "apps/12" rather than a content hash
        instructions = _STYLE_INSTRUCTIONS[code_task["style"]].format(**code_task)
        observation = f"{code_task['prompt'].rstrip()}\n\n{instructions}"
        return observation, {
            "style": code_task["style"],
            "hidden_tests": len(code_task["hidden_tests"]),
            "public_tests": len(code_task["public_tests"]),
            "sandbox_policy": self.sandbox_description,
        }

    def act(self, action: str) -> Transition:
        task = self.code_task
        assert task is not None
        last_turn = self.max_turns is not None and self.turn >= self.max_turns
        info: dict[str, Any] = {"sandbox_policy": self.sandbox_description, "is_correct": False}
        code = last_code_block(action)
        if code is None or not code.strip():
            info["action_valid"] = False
            message = "No code found: put your solution in a fenced code block (```python ... ```)."
            return Transition(message, 0.0, terminated=last_turn, info=info)
        reward, report = self.grade(code)
        info.update(
            is_correct=report.all_passed,
            tests_passed=report.passed,
            tests_total=report.total,
            test_status=report.status_counts(),
        )
        if report.all_passed:
            return Transition("All tests passed.", reward, terminated=True, info=info)
        if last_turn:
            summary = f"Not all tests passed ({report.passed} of {report.total} hidden tests)."
            return Transition(summary, reward, terminated=True, info=info)
        # Another try follows: the reward comes with the episode's last answer, not each try.
        return Transition(self._feedback(task, code), 0.0, info=info)

    def grade(self, code: str) -> tuple[float, TestReport]:
        """The reward `code` earns on the task's hidden tests, and their report. One rule for
        a played answer and for a recorded one graded again (``rllm-eval rescore``)."""
        task = self.code_task
        assert task is not None
        report = run_tests(
            self.sandbox,
            task,
            code,
            task["hidden_tests"],
            stop_at_first_failure=self.reward_mode == "all",  # one failure already decides
        )
        if self.reward_mode == "fraction":
            return report.passed / report.total, report
        return float(report.all_passed), report

    def _feedback(self, task: Row, code: str) -> str:
        """What another try gets to see: failing public tests only, never hidden ones."""
        public = run_tests(self.sandbox, task, code, task["public_tests"])
        failing = _failing_public_tests(task, public)
        if failing:
            return f"Your solution fails these example tests:\n{failing}\nPlease fix it."
        return (
            "Your solution passes the example tests but fails hidden tests. "
            "Consider edge cases and efficiency, then reply with a corrected solution."
        )

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    # Nothing of an episode lives in the sandbox: every test run starts from an empty scratch
    # dir on a read-only root and the dir is emptied after it, so there is no workspace to
    # capture. Tries are graded from the reply alone; the episode's state is the parsed task.
    def capture_state(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.code_task)

    def restore_state(self, state: dict[str, Any] | None) -> None:
        self.code_task = copy.deepcopy(state)

    def close(self) -> None:
        sandbox = getattr(self, "sandbox", None)
        if sandbox is not None:
            sandbox.close()
        super().close()
