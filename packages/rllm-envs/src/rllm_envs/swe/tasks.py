"""SWE task rows: the shipped sets and SWE-bench-format rows, read into one `SWETask`.

A row uses SWE-bench's field names (``instance_id``, ``repo``, ``version``, ``patch``,
``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``problem_statement``; the two test lists
may be JSON strings, as in the published datasets) plus what running it here needs:

==================  ==========================================================================
``image_name``      the Docker image; default SWE-bench's published evaluation image name
                    ``swebench/sweb.eval.x86_64.<instance_id, lower case, __ → _1776_>:latest``;
                    a shipped image (``rllm-swe/...``) is looked for under this machine's
                    prefix (``RLLM_SWE_IMAGE_PREFIX``, default ``rllm-swe/``)
``image_state``     ``"base"`` (default; SWE-bench: the image holds the buggy tree) or
                    ``"fixed"`` (the shipped sets: the image holds the fixed tree, and the buggy
                    state is ``patch`` applied in reverse)
``workdir``         the repository in the container (default ``/testbed``)
``test_cmd``        the test command, run in ``workdir`` with the test files appended
                    (default ``python3 -m pytest -rA``)
``log_parser``      ``"junit"`` (default: the command gets ``--junitxml``) or ``"pytest"``
                    (``-rA`` summary lines of the log)
``environment``     extra environment variables for every command (e.g. a conda ``PATH``)
``base``            the snapshot id of the repository; checked against the image's label
==================  ==========================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm_envs.core.tasks import Row, TaskSet, TaskSources
from rllm_envs.swe.builder.projects import local_image
from rllm_envs.swe.testlog import file_of_test, log_parser

DATA_DIR = Path(__file__).parent / "data"
SHIPPED_SETS = {"train": DATA_DIR / "train.jsonl", "test": DATA_DIR / "test.jsonl"}
DEFAULT_WORKDIR = "/testbed"
DEFAULT_TEST_CMD = "python3 -m pytest -rA"
IMAGE_STATES = ("base", "fixed")
REQUIRED_COLUMNS = ("instance_id", "problem_statement", "FAIL_TO_PASS")


class TaskRowError(ValueError):
    """A row the SWE env cannot run, with what is wrong."""


def swebench_image_name(instance_id: str) -> str:
    """The image SWE-bench publishes for an instance (``astropy__astropy-12907`` →
    ``swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest``)."""
    key = f"swebench/sweb.eval.x86_64.{instance_id.lower()}"
    return key.replace("__", "_1776_") + ":latest"


def _test_ids(value: Any, column: str, instance_id: str) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise TaskRowError(f"{instance_id}: {column} is not a JSON list ({error})") from error
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TaskRowError(f"{instance_id}: {column} must be a list of test ids")
    return tuple(value)


@dataclass(frozen=True)
class SWETask:
    instance_id: str
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    image: str
    image_state: str = "base"
    patch: str = ""
    test_patch: str = ""
    workdir: str = DEFAULT_WORKDIR
    test_cmd: str = DEFAULT_TEST_CMD
    log_parser: str = "junit"
    environment: Mapping[str, str] = field(default_factory=dict)
    repo: str = ""
    base: str = ""

    @property
    def graded_tests(self) -> tuple[str, ...]:
        return self.fail_to_pass + self.pass_to_pass

    @property
    def test_files(self) -> tuple[str, ...]:
        """The files that hold the graded tests, in a stable order (what the grader runs)."""
        return tuple(dict.fromkeys(file_of_test(test) for test in self.graded_tests))

    @property
    def hidden_files(self) -> tuple[str, ...]:
        """Test files the agent's repository does not hold: those with FAIL_TO_PASS tests."""
        return tuple(dict.fromkeys(file_of_test(test) for test in self.fail_to_pass))


def to_swe_task(row: Mapping[str, Any]) -> SWETask:
    """Read one row (see the module docstring); a clear TaskRowError when it cannot run."""
    missing = [column for column in REQUIRED_COLUMNS if not row.get(column)]
    instance_id = str(row.get("instance_id") or "?")
    if missing:
        raise TaskRowError(f"{instance_id}: missing column(s) {missing}")
    state = str(row.get("image_state") or "base")
    if state not in IMAGE_STATES:
        raise TaskRowError(f"{instance_id}: image_state must be one of {IMAGE_STATES}")
    if state == "fixed" and not row.get("patch"):
        raise TaskRowError(f"{instance_id}: image_state 'fixed' needs the gold 'patch'")
    parser = str(row.get("log_parser") or "junit")
    try:
        log_parser(parser)
    except ValueError as error:
        raise TaskRowError(f"{instance_id}: {error}") from error
    workdir = str(row.get("workdir") or DEFAULT_WORKDIR).rstrip("/") or "/"
    if not workdir.startswith("/"):
        raise TaskRowError(f"{instance_id}: workdir must be an absolute path, got {workdir!r}")
    environment = row.get("environment") or {}
    if isinstance(environment, str):
        environment = json.loads(environment)
    if not isinstance(environment, Mapping):
        raise TaskRowError(f"{instance_id}: environment must map names to values")
    fail_to_pass = _test_ids(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", instance_id)
    if not fail_to_pass:
        raise TaskRowError(f"{instance_id}: FAIL_TO_PASS is empty")
    return SWETask(
        instance_id=instance_id,
        problem_statement=str(row["problem_statement"]),
        fail_to_pass=fail_to_pass,
        pass_to_pass=_test_ids(row.get("PASS_TO_PASS"), "PASS_TO_PASS", instance_id),
        image=local_image(str(row.get("image_name") or swebench_image_name(instance_id))),
        image_state=state,
        patch=str(row.get("patch") or ""),
        test_patch=str(row.get("test_patch") or ""),
        workdir=workdir,
        test_cmd=str(row.get("test_cmd") or DEFAULT_TEST_CMD),
        log_parser=parser,
        environment={str(k): str(v) for k, v in environment.items()},
        repo=str(row.get("repo") or ""),
        base=str(row.get("base") or ""),
    )


def load_swe_tasks(
    tasks: str | Sequence[Row] | TaskSet | None,
    split: str,
    column_map: Mapping[str, str] | None = None,
) -> TaskSet:
    """Rows from a source (``shipped:train``, a JSONL path, ``hf:…``, ``registry:…``) or a list;
    every row is checked up front so a bad one fails at ``make``, not mid-training."""
    source = f"shipped:{split}" if tasks is None else tasks
    task_set = TaskSources(shipped=SHIPPED_SETS).load(
        source, split=split, column_map=column_map, required=("instance_id",)
    )
    for row in task_set.rows:
        to_swe_task(row)
    return task_set
