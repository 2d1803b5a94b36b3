"""``rllm-envs harbor-check [FOLDER ...]``: each Harbor task's built-in check.

Every task is played twice in ``rllm/Harbor-v0``: once by its oracle (``solution/solve.sh``),
which must score 1.0, and once submitted untouched, which must score 0.0 (a task whose starting
state already passes its tests teaches nothing). Without a folder the shipped tasks are
checked. Exit status 0 when every task passes both, 1 otherwise, 2 for bad input.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from rllm_envs.harbor.task_folder import HarborTaskError, find_tasks, shipped_tasks_dir

SUBMIT_UNTOUCHED = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'


@dataclass(frozen=True)
class TaskCheck:
    name: str
    oracle_reward: float | None  # None: the task has no oracle
    untouched_reward: float
    problem: str = ""

    @property
    def passed(self) -> bool:
        oracle_ok = self.oracle_reward is None or self.oracle_reward == 1.0
        return oracle_ok and self.untouched_reward == 0.0 and not self.problem


def check_folder(folder: str | Path, *, docker_url: str | None = None) -> list[TaskCheck]:
    """The oracle and untouched rewards of every task under `folder`."""
    from rllm_envs.harbor.env import HarborEnv

    rows = [{"task_dir": str(path)} for path in find_tasks(folder)]
    env = HarborEnv(rows, docker_url=docker_url)
    checks = []
    try:
        for row in rows:
            _, info = env.reset(options={"task": row})
            name = info.get("task_name", row["task_dir"])
            problems = [f"reset: {info['failure']}"] if "failure" in info else []
            oracle = None
            if env.harbor_task is not None and env.harbor_task.has_oracle:
                _, oracle, _, _, info = env.play_oracle()
                problems += [
                    f"oracle: {info[key]}" for key in ("verifier_error", "failure") if key in info
                ]
                env.reset(options={"task": row})
            _, untouched, _, _, info = env.step(SUBMIT_UNTOUCHED)
            problems += [f"untouched: {info[key]}" for key in ("failure",) if key in info]
            checks.append(TaskCheck(name, oracle, untouched, "; ".join(problems)))
    finally:
        env.close()
    return checks


def add_check_command(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "harbor-check",
        help="check Harbor tasks: the oracle scores 1.0, an untouched submit 0.0",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument(
        "folders",
        nargs="*",
        metavar="FOLDER",
        help="a task or a folder of tasks (default: the shipped ones)",
    )
    check.set_defaults(run=run_check)


def run_check(args: argparse.Namespace) -> int:
    from rich.table import Table

    from rllm_envs.core.usage import UsageError
    from rllm_envs.setup.display import make_console

    table = Table(title="Harbor tasks")
    for column in ("task", "oracle", "untouched", "verdict"):
        table.add_column(column, overflow="fold")
    checks = []
    for folder in args.folders or [shipped_tasks_dir()]:
        try:
            checks += check_folder(folder)
        except HarborTaskError as error:
            raise UsageError(str(error)) from error
    for check in checks:
        oracle = "-" if check.oracle_reward is None else f"{check.oracle_reward:g}"
        verdict = "ok" if check.passed else f"FAILED {check.problem}".strip()
        table.add_row(check.name, oracle, f"{check.untouched_reward:g}", verdict)
    make_console().print(table)
    return 0 if all(check.passed for check in checks) else 1
