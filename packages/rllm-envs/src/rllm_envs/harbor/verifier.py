"""Grading a Harbor trial: the task's tests run after the agent, and their reward file is read.

The agent's processes are killed first (nothing it left running acts during the tests). Then:

* shared mode: the tests run in the agent's own container, as Harbor runs them;
* separate mode: in a fresh container (tests/'s image when it has a Dockerfile, else the
  task's), which gets only the task's ``artifacts``, each at its own path (a folder replaces
  the one there), and whatever the agent put in ``/logs/artifacts``, as Harbor hands them.

Either way ``/tests`` and ``/logs/verifier`` are emptied before the task's ``tests/`` go in, so
a reward file the agent planted, or tests it wrote, cannot count. ``bash /tests/test.sh`` runs
from the working directory under the task's verifier timeout, and the reward is read from
``/logs/verifier/reward.json`` (``{"reward": 0.75}``, or several named numbers) or else
``reward.txt`` (one number). No readable reward is reward 0 with the reason in the verdict.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from rllm_envs.harbor.containers import TaskContainer, verifier_image
from rllm_envs.harbor.task_folder import ARTIFACTS_DIR, SHARED, HarborTask

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
# How much of the tests' output a verdict keeps (the end: where a failure is reported).
OUTPUT_TAIL_CHARS = 4000


def emptied(*folders: str) -> str:
    """The command that empties `folders` (made anew, writable by any user: tests may drop to
    one)."""
    named = " ".join(folders)
    return f"rm -rf {named} && mkdir -p {named} && chmod 777 {named}"


@dataclass
class Verdict:
    reward: float
    rewards: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # why no reward could be read (the reward is then 0)
    exit_code: int | None = None
    output: str = ""

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "rewards": dict(self.rewards),
            "verifier_exit_code": self.exit_code,
            "verifier_output": self.output,
        }
        if self.error:
            summary["verifier_error"] = self.error
        return summary


def parse_rewards(text: str, kind: str) -> dict[str, float]:
    """The named rewards in a reward file's text (``kind``: ``json`` or ``txt``); ValueError
    for anything but finite numbers."""
    if kind == "txt":
        value = float(text.strip())
        rewards = {"reward": value}
    else:
        data = json.loads(text)
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            data = {"reward": data}
        if not isinstance(data, dict) or not data:
            raise ValueError("reward.json must be a number or an object of named numbers")
        rewards = {}
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"reward {key!r} is not a number: {value!r}")
            rewards[str(key)] = float(value)
    if not all(math.isfinite(value) for value in rewards.values()):
        raise ValueError(f"a reward is not finite: {rewards}")
    return rewards


def scalar_reward(rewards: dict[str, float]) -> float:
    """The one reward RL trains on: the ``reward`` entry, else the mean of the named ones."""
    if "reward" in rewards:
        return rewards["reward"]
    return sum(rewards.values()) / len(rewards)


def read_verdict(container: TaskContainer, exit_code: int, output: str) -> Verdict:
    tail = output[-OUTPUT_TAIL_CHARS:]
    for name, kind in (("reward.json", "json"), ("reward.txt", "txt")):
        data = container.read_file(f"{VERIFIER_DIR}/{name}")
        if data is None:
            continue
        try:
            rewards = parse_rewards(data.decode("utf-8", "replace"), kind)
        except ValueError as error:
            return Verdict(
                0.0, error=f"{name} is unreadable: {error}", exit_code=exit_code, output=tail
            )
        return Verdict(scalar_reward(rewards), rewards, exit_code=exit_code, output=tail)
    error = f"the tests wrote no reward file ({VERIFIER_DIR}/reward.json or reward.txt)"
    return Verdict(0.0, error=error, exit_code=exit_code, output=tail)


def run_tests(container: TaskContainer, task: HarborTask, *, upload: bool = True) -> Verdict:
    # A separate verifier built from tests/ holds them already: only the rewards' folder goes.
    folders = (TESTS_DIR, VERIFIER_DIR) if upload else (VERIFIER_DIR,)
    reset = container.exec(emptied(*folders), timeout=60)
    if reset.exit_code != 0:
        return Verdict(
            0.0, error=f"could not prepare the verifier's folders: {reset.output[-500:]}"
        )
    if upload:
        container.put_folder(TESTS_DIR, task.tests_dir)
    result = container.exec(
        f"bash {TESTS_DIR}/test.sh", timeout=task.verifier_timeout, env=task.verifier_env
    )
    verdict = read_verdict(container, result.exit_code, result.output)
    if result.timed_out and verdict.error:
        verdict.error = f"the tests timed out after {task.verifier_timeout:g} s"
    return verdict


def verify(
    client: Any, task: HarborTask, agent: TaskContainer, agent_image: str, *, allow_network: bool
) -> Verdict:
    """Grade the agent's container (see the module docstring); removes what it started."""
    agent.stop_processes()
    if task.verifier_mode == SHARED:
        return run_tests(agent, task)
    image = verifier_image(client, task, agent_image)
    checker = TaskContainer.start(client, image, task, allow_network=allow_network, role="verifier")
    try:
        checker.exec(emptied(ARTIFACTS_DIR), timeout=60)
        for source in (ARTIFACTS_DIR, *(artifact.source for artifact in task.artifacts)):
            agent.copy_into(checker, source)
        return run_tests(checker, task, upload=not task.bundles_tests)
    finally:
        checker.remove()
