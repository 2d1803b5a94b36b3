"""``rllm-envs setup`` and ``rllm-envs doctor``: bad input and missing parts give one line naming
the fix, doctor says which envs are ready and why not, and the envs' own errors name the setup
command (never a repository script).

Nothing here builds an image: the cases that reach the Docker engine stop before any build
(the fresh names they use stay absent). Building from an installed wheel is
tests/envs/test_standalone.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import gymnasium as gym
import pytest
from rich.console import Console
from rllm_envs.sandbox.docker_images import BuildError
from rllm_envs.setup import rootfs
from rllm_envs.setup.base import SetupError, SetupOptions, SetupRun, Stage, StageFailed
from rllm_envs.setup.cli import main
from rllm_envs.setup.display import run_stages
from rllm_envs.setup.stages import stages_for
from rllm_envs.swe.builder.projects import local_image
from rllm_envs.swe.tasks import load_swe_tasks, to_swe_task

from tests.cli_errors import assert_one_line_error
from tests.envs.swe_support import docker_client, require_images, shipped_rows

PROG = "rllm-envs"
PACKAGES = Path(__file__).resolve().parents[2] / "packages"


def run_cli(*args: str, **environment: str) -> subprocess.CompletedProcess:
    """``python -m rllm_envs ...`` as a user runs it, with `environment` added."""
    return subprocess.run(
        [sys.executable, "-m", "rllm_envs", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        # Wide enough that no table cell folds, so a message is found whole.
        env={**os.environ, "COLUMNS": "400", **environment},
    )


def dead_socket(tmp_path: Path) -> str:
    return f"unix://{tmp_path / 'no-engine.sock'}"


def fresh_name() -> str:
    return f"rllm-setup-test-{uuid.uuid4().hex[:8]}"


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["setup"], ("required", "code|swe|web|harbor|all")),
        (["setup", "games"], ("invalid choice: 'games'", "'code', 'swe', 'web', 'harbor', 'all'")),
        (["setup", "code", "--sandbox-image", "Bad Name"], ("--sandbox-image", "'Bad Name'")),
        (["setup", "swe", "--swe-image-prefix", "UPPER/"], ("--swe-image-prefix",)),
        (["setup", "swe", "--swe-project", "numpy"], ("'numpy'", "toolz", "slugify")),
        (["setup", "code", "--sandbox-base", "alpine"], ("'alpine'", "'auto'", "'rootfs'")),
        (["doctor", "chess"], ("unknown env 'chess'", "swe", "frozenlake")),
        ([], ("required",)),
    ],
)
def test_bad_input_is_one_line_and_status_2(capsys, argv, expected):
    code = main(argv)
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before anything ran
    assert_one_line_error(code, captured.err, PROG, *expected)


# -- what setup cannot make itself -----------------------------------------------------------
def test_no_docker_engine_is_one_line_naming_the_fix(tmp_path):
    socket = dead_socket(tmp_path)
    result = run_cli("setup", "swe", DOCKER_HOST=socket)
    line = assert_one_line_error(
        result.returncode, result.stderr, PROG, f"no Docker engine answers at {socket}"
    )
    # The engine may be installed and only the address wrong: the fix names the address.
    assert f"DOCKER_HOST is {socket}" in line and f"dockerd -H {socket}" in line
    assert "unset DOCKER_HOST" in line
    assert "✗ Docker engine" in result.stdout


def test_debootstrap_preflight_names_each_fix():
    assert rootfs.preflight_problem("/usr/sbin/debootstrap", True, "http://m", None) is None
    missing = rootfs.preflight_problem(None, True, "http://m", None)
    assert "apt-get install debootstrap" in missing
    not_root = rootfs.preflight_problem("/usr/sbin/debootstrap", False, "http://m", None)
    assert "as root" in not_root and "--sandbox-base python" in not_root
    offline = rootfs.preflight_problem("/usr/sbin/debootstrap", True, "http://m", "refused")
    assert "http://m does not answer (refused)" in offline and "--debian-mirror" in offline
    assert rootfs.mirror_problem("http://127.0.0.1:9/debian", timeout=5) is not None


@pytest.mark.docker
def test_rootfs_stage_stops_with_the_fix_before_building(tmp_path):
    client = docker_client()
    name = fresh_name()
    common = ["setup", "swe", "--rootfs-image", f"{name}:rootfs", "--swe-image-prefix", f"{name}/"]
    # Port 9 (discard) has no listener on the loopback: no mirror answers there.
    offline = run_cli(*common, "--debian-mirror", "http://127.0.0.1:9/debian")
    line = assert_one_line_error(offline.returncode, offline.stderr, PROG, "does not answer")
    assert "--debian-mirror" in line and "RLLM_DEBIAN_MIRROR" in line
    # Without debootstrap on the PATH (the interpreter is named by its full path).
    no_tool = run_cli(*common, PATH=str(tmp_path))
    assert_one_line_error(no_tool.returncode, no_tool.stderr, PROG, "apt-get install debootstrap")
    assert not client.images.list(filters={"reference": f"{name}*"})  # nothing was built


# -- doctor ----------------------------------------------------------------------------------
def test_doctor_says_why_an_env_is_not_ready_and_fails_for_it(tmp_path):
    socket = dead_socket(tmp_path)
    named = run_cli("doctor", "swe", "frozenlake", DOCKER_HOST=socket)
    assert named.returncode == 1, named.stderr
    assert "rllm/SWE-v0" in named.stdout and "rllm/FrozenLake-v0" in named.stdout
    assert f"no Docker engine answers at {socket}" in named.stdout
    assert "needs the Docker engine" in named.stdout  # the image check says why it cannot look
    ready = run_cli("doctor", "frozenlake", DOCKER_HOST=socket)
    assert ready.returncode == 0 and "nothing beyond the base install" in ready.stdout
    # Named or not, code is ready on bwrap alone; its docker checks are optional.
    everything = run_cli("doctor", DOCKER_HOST=socket)
    assert everything.returncode == 0, everything.stdout
    assert "backend='docker'" in everything.stdout


@pytest.mark.docker
def test_doctor_finds_the_images_setup_made():
    require_images({row["image_name"] for row in shipped_rows("test")})
    result = run_cli("doctor", "swe", "code")
    assert result.returncode == 0, result.stdout
    assert "all 10 project images present" in result.stdout
    assert "rllm-sandbox:1 present" in result.stdout


# -- stages and their display ----------------------------------------------------------------
def test_each_target_runs_its_stages_once_in_order():
    def names(*targets):
        return [stage.name for stage in stages_for(targets)]

    assert names("code") == ["docker-engine", "sandbox-image", "bubblewrap"]
    assert names("swe") == ["docker-engine", "rootfs", "swe-base", "swe-projects"]
    assert names("web") == ["browser"]
    assert names("swe", "code") == names("code", "swe")
    assert names("harbor") == ["docker-engine", "rootfs", "harbor-images"]
    assert names("all") == [
        "docker-engine", "rootfs", "sandbox-image", "bubblewrap", "swe-base", "swe-projects",
        "harbor-images", "browser",
    ]  # fmt: skip


def _stage(name, run):
    return Stage(name, f"the {name}", run)


def test_display_times_each_stage_and_stops_at_the_first_failure():
    options = SetupOptions(
        sandbox_image="s:1", rootfs_image="r:1", swe_image_prefix="p/", swe_cache=Path("/tmp")
    )
    console = Console(record=True, width=200, force_terminal=False)
    counted = []

    def counting(run, progress):
        progress.items(2)
        for item in ("one", "two"):
            progress.advance(item)
            counted.append(item)
        return "2 made"

    def missing(run, progress):
        raise SetupError("a part is missing: install it")

    ran = run_stages([_stage("first", counting)], SetupRun(options), console)
    assert [(result.name, result.outcome) for result in ran] == [("first", "2 made")]
    with pytest.raises(SetupError):
        run_stages(
            [_stage("second", missing), _stage("never", counting)], SetupRun(options), console
        )
    text = console.export_text()
    assert "✓ the first: 2 made (" in text and "✗ the second (" in text
    assert "the never" not in text and counted == ["one", "two"]

    def broken_build(run, progress):
        raise BuildError("docker build of x failed: step 2")

    with pytest.raises(StageFailed, match="step 2"):
        run_stages([_stage("build", broken_build)], SetupRun(options), console)


# -- the envs name the command ---------------------------------------------------------------
def test_no_module_of_the_packages_names_a_repository_script():
    named = [
        f"{path.relative_to(PACKAGES)}:{number}"
        for path in PACKAGES.glob("*/src/**/*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "scripts/" in line
    ]
    assert not named, f"an installed package cannot run repository scripts: {named}"


def test_env_errors_name_the_setup_command(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", dead_socket(tmp_path))
    with pytest.raises(RuntimeError) as engine_error:
        gym.make("rllm/SWE-v0")
    assert "rllm-envs setup swe" in str(engine_error.value) and "dockerd" in str(engine_error.value)


@pytest.mark.docker
def test_a_missing_sandbox_image_names_setup_with_its_name():
    docker_client()
    from rllm_envs.sandbox import make_sandbox

    missing = f"{fresh_name()}:absent"
    with pytest.raises(RuntimeError) as error:
        make_sandbox("docker", image=missing)
    assert f"rllm-envs setup code --sandbox-image {missing}" in str(error.value)


def test_shipped_images_are_read_under_this_machines_prefix(monkeypatch):
    row = load_swe_tasks(None, "test").rows[0]
    assert to_swe_task(row).image == row["image_name"]  # the default prefix: as shipped
    monkeypatch.setenv("RLLM_SWE_IMAGE_PREFIX", "elsewhere/swe-")
    renamed = to_swe_task(row).image
    assert renamed == "elsewhere/swe-" + row["image_name"].removeprefix("rllm-swe/")
    # Only shipped images are renamed; a row's own image stays as it is.
    assert local_image("swebench/sweb.eval.x86_64.a:latest") == "swebench/sweb.eval.x86_64.a:latest"
    monkeypatch.setenv("RLLM_SANDBOX_IMAGE", "mine:2")
    from rllm_envs.sandbox.docker_backend import DockerSandbox

    field = DockerSandbox.__dataclass_fields__["image"]
    assert field.default_factory() == "mine:2"  # read when a sandbox is made, not at import
