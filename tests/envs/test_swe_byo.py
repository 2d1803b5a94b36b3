"""Bring your own rows: SWE-bench-format rows and an image laid out as SWE-bench's evaluation
images are (the repository at the buggy base commit in /testbed, owned by root, with its git
history; the new tests come in ``test_patch``), named as SWE-bench names them, built here."""

from __future__ import annotations

import io
import json
import tarfile

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.core.dataset_registry import DatasetRegistry
from rllm_envs.swe.builder.mutations import file_diff
from rllm_envs.swe.integrity import bash, play
from rllm_envs.swe.tasks import swebench_image_name

from tests.envs.swe_support import FAST_POLICY, require_images
from tests.parts import require_module

pytestmark = pytest.mark.slow

INSTANCE_ID = "demo__calc-1"
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
OLD_TESTS = "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"
NEW_TESTS = (
    OLD_TESTS + "\n\ndef test_add():\n    from calc import add\n\n    assert add(2, 2) == 4\n"
)
DOCKERFILE = """\
FROM rllm-swe/base:1
COPY testbed /testbed
RUN chown -R root:root /testbed && cd /testbed && git init -q && git add -A \\
 && git -c user.name=dev -c user.email=dev@x commit -qm 'older work' \\
 && echo '# notes' >> README.md && git add -A \\
 && git -c user.name=dev -c user.email=dev@x commit -qm 'base commit' \\
 && chmod -R go-w /testbed
WORKDIR /testbed
"""


def _tar(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def row(**changes) -> dict:
    base = {
        "instance_id": INSTANCE_ID,
        "repo": "demo/calc",
        "version": "0.1",
        "problem_statement": "calc.add(2, 2) returns 0 instead of 4.",
        "patch": file_diff("calc/__init__.py", BUGGY, FIXED),
        "test_patch": file_diff("tests/test_calc.py", OLD_TESTS, NEW_TESTS),
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_sub"]),
        "test_cmd": "python3 -m pytest -rA -p no:cacheprovider",
    }
    return {**base, **changes}


@pytest.fixture(scope="module")
def swebench_image():
    client = require_images(["rllm-swe/base:1"])
    context = {
        "Dockerfile": DOCKERFILE,
        "testbed/calc/__init__.py": BUGGY,
        "testbed/tests/test_calc.py": OLD_TESTS,
        "testbed/README.md": "calc\n",
    }
    tag = swebench_image_name(INSTANCE_ID)
    client.images.build(fileobj=io.BytesIO(_tar(context)), custom_context=True, tag=tag, rm=True)
    yield tag
    client.images.remove(tag, force=True)


@pytest.mark.parametrize("parser", ["junit", "pytest"])
def test_swebench_rows_grade_gold_noop_and_test_edits(swebench_image, parser):
    rows = [row(log_parser=parser, environment={"PYTHONDONTWRITEBYTECODE": "1"})]
    env = gym.make("rllm/SWE-v0", tasks=rows, policy=FAST_POLICY)
    try:
        observation, info = env.reset(seed=0)
        assert info["task_id"] == INSTANCE_ID and "returns 0 instead of 4" in observation
        inside = env.step(
            bash(
                "git log --all --oneline; git cat-file --batch-all-objects --batch-check | wc -l;"
                " ls tests; cat README.md; id -u; echo $PYTHONDONTWRITEBYTECODE"
            )
        )[0]
        assert inside.count("Initial commit") == 1 and "older work" not in inside
        assert "test_calc.py" not in inside  # the file with FAIL_TO_PASS tests is hidden
        assert "# notes" in inside and "65432" in inside and "\n1\n" in inside
        for agent, reward in (("gold", 1.0), ("noop", 0.0), ("edit_failing_tests", 0.0)):
            played = play(env, rows[0], agent)
            assert played.failure is None and played.reward == reward, (agent, played.info)
        assert played.info["test_results"]["tests/test_calc.py::test_sub"] == "passed"
        assert played.info["test_results"]["tests/test_calc.py::test_add"] == "failed"
    finally:
        env.close()


def test_rows_come_from_files_the_registry_and_hf_datasets(swebench_image, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row()) + "\n")
    DatasetRegistry.register_dataset("swe-demo", [row()], split="test")
    datasets = require_module("datasets", "datasets comes with rllm-envs[datasets]")
    hf_dir = tmp_path / "hf"
    datasets.Dataset.from_list([row()]).save_to_disk(str(hf_dir))
    for source, split in (
        (str(path), "train"),
        ("registry:swe-demo", "test"),
        (f"hf:{hf_dir}", "train"),
    ):
        env = gym.make("rllm/SWE-v0", tasks=source, split=split, policy=FAST_POLICY)
        try:
            assert len(env.unwrapped.tasks) == 1
            played = play(env, dict(env.unwrapped.tasks[0]), "gold")
            assert played.reward == 1.0, (source, played.info.get("reason"))
        finally:
            env.close()


def test_a_row_whose_test_patch_does_not_apply_is_a_grader_failure(swebench_image):
    broken = row(test_patch=file_diff("tests/test_calc.py", "nothing like it\n", "x\n"))
    env = gym.make("rllm/SWE-v0", tasks=[broken], policy=FAST_POLICY)
    try:
        played = play(env, broken, "gold")
        assert played.failure == "grader" and played.reward == 0.0
    finally:
        env.close()
