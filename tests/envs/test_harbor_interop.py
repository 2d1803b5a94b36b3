"""Harbor's own code and rllm/Harbor-v0 agree on the task format: Harbor's task model and linter
accept every shipped task, and a task scaffolded by ``harbor tasks init`` (separate verifier,
tests baked into their own image) runs in rllm/Harbor-v0 as written.

Harbor needs Python 3.12+: ``scripts/setup.sh`` installs it in ``.venv/harbor``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from rllm_envs.harbor.check import check_folder
from rllm_envs.harbor.containers import image_tag
from rllm_envs.harbor.task_folder import find_tasks, load_task, shipped_tasks_dir

from tests.envs.swe_support import docker_client
from tests.parts import require_part

REPO_ROOT = Path(__file__).resolve().parents[2]
HARBOR = REPO_ROOT / ".venv" / "harbor" / "bin"
SHIPPED = find_tasks(shipped_tasks_dir())
# Harbor's rules that judge validity (the others recommend a style: e.g. "shared-verifier"
# asks for separate verifiers, and 8 of the shipped tasks use shared ones on purpose).
VALIDITY_RULES = ("invalid-task-config", "unknown-config-field", "invalid-task-files")


def harbor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    require_part(
        (HARBOR / "harbor").exists(), f"Harbor's tools are missing ({HARBOR}): run scripts/setup.sh"
    )
    return subprocess.run(
        [str(HARBOR / args[0]), *args[1:]],
        cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_harbors_task_model_loads_every_shipped_task():
    program = (
        "import json, sys\n"
        "from harbor.models.task.task import Task\n"
        "tasks = [Task(path) for path in sys.argv[1:]]\n"
        "print(json.dumps([[t.config.task.name, t.config.verifier.timeout_sec] for t in tasks]))\n"
    )
    done = harbor("python", "-c", program, *map(str, SHIPPED))
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    ours = [load_task(path) for path in SHIPPED]
    assert seen == [[task.name, task.verifier_timeout] for task in ours]


def test_harbors_linter_finds_every_shipped_task_valid():
    selected = [argument for rule in VALIDITY_RULES for argument in ("--select", rule)]
    done = harbor("harbor", "lint", "--json", *selected, *map(str, SHIPPED))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(done.stdout) == []


def test_a_task_scaffolded_by_harbor_runs_as_written(tmp_path):
    done = harbor(
        "harbor", "tasks", "init", "rllm/answer", "--no-pytest", "--description", "d",
        "--author", "rllm", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    task = tmp_path / "answer"
    (task / "instruction.md").write_text("Write the number 42 into /app/answer.txt.\n")
    # No registry is reachable here: the scaffold's ubuntu base becomes the local Debian one.
    for dockerfile in (task / "environment" / "Dockerfile", task / "tests" / "Dockerfile"):
        text = dockerfile.read_text()
        assert text.startswith("FROM ubuntu:")
        dockerfile.write_text(text.replace(text.splitlines()[0], "FROM debian:bookworm-slim", 1))
    config = task / "task.toml"
    assert 'environment_mode = "separate"' in config.read_text()
    config.write_text(
        config.read_text().replace("artifacts = []", 'artifacts = ["/app/answer.txt"]', 1)
    )
    test_script = task / "tests" / "test.sh"
    test_script.write_text(
        test_script.read_text()
        + '\nif [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then echo 1; else echo 0; fi'
        " > /logs/verifier/reward.txt\n"
    )
    solve = task / "solution" / "solve.sh"
    solve.write_text(solve.read_text() + "\necho 42 > /app/answer.txt\n")
    linted = harbor("harbor", "lint", "--json", str(task))
    assert json.loads(linted.stdout) == [], linted.stdout
    loaded = load_task(task)
    assert loaded.verifier_mode == "separate" and loaded.bundles_tests
    client = docker_client()
    try:
        client.images.get("debian:bookworm-slim")
    except Exception:
        require_part(False, "debian:bookworm-slim is missing: rllm-envs setup harbor")
    try:
        (check,) = check_folder(task)
    finally:  # this folder's two images (its environment/ and tests/) go with it
        for folder in (loaded.environment_dir, loaded.tests_dir):
            client.images.remove(image_tag(loaded, folder), force=True)
    assert (check.oracle_reward, check.untouched_reward) == (1.0, 0.0), check


@pytest.fixture(autouse=True)
def _no_stray_harbor_home(tmp_path, monkeypatch):
    # Harbor keeps caches and settings under $HOME: the tests keep theirs apart.
    monkeypatch.setenv("HOME", str(tmp_path))
