"""``rllm-envs setup serve ID``: one Docker image per env id, running ``rllm-envs serve ID``.

The image test builds rllm/FrozenLake-v0's image under the tests' own prefix, checks that a
second setup builds nothing, runs the image, plays seeded episodes through rllm/Remote-v0
against the same episodes in-process, and stops it with ``docker stop`` while a session is
open: exit status 0 at once, the session's env closed. The container is removed, failures
included; the image stays, as the rootfs does, so a later run builds only what changed (the
setup untags the image of an earlier recipe). The other tests need no engine: the refusals,
the parsing and the wheel layout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm ids
from rllm_envs.setup.cli import build_parser, main
from rllm_envs.setup.serve_images import image_repository, slug
from rllm_envs.setup.serve_wheels import ImagePython, unpack
from rllm_envs.setup.stages import stages_for

from tests.cli_errors import assert_one_line_error
from tests.envs.swe_support import docker_client
from tests.envs.test_serve import LAKE, MOVES, free_port, play, play_in_process
from tests.parts import require_part

PROG = "rllm-envs"
REPO_ROOT = Path(__file__).resolve().parents[2]
# The first build downloads about 20 wheels; later ones take them from the cache.
SETUP_TIMEOUT_S = 600
# Kept apart from the images users build (rllm-serve/), and kept between runs.
TEST_PREFIX = "rllm-serve-test/"


# -- what the command refuses, before anything runs -------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["setup", "serve", "rllm/SWE-v0"],
            (
                "rllm/SWE-v0 starts Docker containers",
                "beside Docker",
                "rllm-envs serve rllm/SWE-v0",
            ),
        ),
        (
            ["setup", "serve", LAKE, "rllm/Web-v0"],
            ("rllm/Web-v0 drives a Chromium browser", "rllm-envs serve rllm/Web-v0"),
        ),
        (["setup", "serve", "rllm/Code-v0"], ("rllm/Code-v0 runs code", "beside Docker")),
        (["setup", "serve", "rllm/Harbor-v0"], ("rllm/Harbor-v0 starts Docker containers",)),
        (["setup", "serve"], ("serve needs the env ids after it",)),
        (["setup", "serve", "code"], ("serve needs the env ids after it",)),
        (["setup", "serve", "rllm/NoSuchEnv-v0"], ("not a registered Gymnasium env",)),
        (["setup", "serve", "my_pkg.envs:my/Env-v0"], ("your own module",)),
        (["setup", "serve", "rllm/GymText-v0"], ("CartPole-v1",)),
        (["setup", "serve", LAKE, "--serve-image-prefix", "Bad/"], ("--serve-image-prefix",)),
    ],
)
def test_setup_serve_refuses_in_one_line(capsys, argv, expected):
    code = main(argv)
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before any stage ran
    assert_one_line_error(code, captured.err, PROG, *expected)


def test_env_ids_follow_serve_and_all_leaves_serve_out():
    args = build_parser().parse_args(
        ["setup", "code", "serve", LAKE, "CartPole-v1", "swe", "serve", "rllm/Math-v0"]
    )
    assert args.targets == ["code", "serve", "swe"]
    assert args.serve_envs == [LAKE, "CartPole-v1", "rllm/Math-v0"]
    assert [stage.name for stage in stages_for(["serve"])] == ["docker-engine", "serve-images"]
    assert "serve-images" not in [stage.name for stage in stages_for(["all"])]
    assert slug(LAKE) == "frozenlake-v0" and slug("ALE/Pong-v5") == "ale-pong-v5"
    assert image_repository("rllm-serve/", "CartPole-v1") == "rllm-serve/cartpole-v1"


def test_wheels_unpack_as_site_packages(tmp_path):
    wheel = tmp_path / "demo-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo/__init__.py", "")
        archive.writestr("demo-1.0.data/platlib/demo_ext.py", "")
        archive.writestr("demo-1.0.data/scripts/demo", "#!/bin/sh\n")
        archive.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n")
    unpack(wheel, tmp_path / "site")
    site = tmp_path / "site"
    found = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert found == ["demo-1.0.dist-info/METADATA", "demo/__init__.py", "demo_ext.py"]
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("../escape.py", "")
    with pytest.raises(RuntimeError, match="outside the wheel"):
        unpack(wheel, tmp_path / "other")
    options = ImagePython("3.11", "x86_64", (2, 36), "/site").pip_options()
    assert options[:6] == ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"]
    assert "manylinux_2_36_x86_64" in options and "manylinux2014_x86_64" in options
    assert "manylinux_2_37_x86_64" not in options  # newer than the image's glibc


# -- the image --------------------------------------------------------------------------------
def setup_serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rllm_envs", "setup", "serve", *args],
        capture_output=True, text=True, timeout=SETUP_TIMEOUT_S, check=False,
        stdin=subprocess.DEVNULL, cwd=REPO_ROOT,
    )  # fmt: skip


def wait_until_healthy(url: str, container, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if json.loads(response.read()) == {"status": "healthy"}:
                    return
        except OSError:
            container.reload()
            if container.status == "exited":
                raise AssertionError(f"the server exited: {container.logs().decode()}") from None
            time.sleep(0.2)
    raise AssertionError(f"no answer from {url}: {container.logs().decode()}")


def has_a_base(client) -> bool:
    from rllm_envs.sandbox.image_names import rootfs_image
    from rllm_envs.setup.sandbox_image import PYTHON_BASE, image_id

    return any(image_id(client, name) for name in (PYTHON_BASE, rootfs_image()))


@pytest.mark.slow
@pytest.mark.docker
def test_the_image_serves_in_process_episodes_and_stops_cleanly():
    client = docker_client()
    require_part(has_a_base(client), "the Debian rootfs image: rllm-envs setup swe")
    repository = image_repository(TEST_PREFIX, LAKE)
    container = None
    try:
        first = setup_serve(LAKE, "--serve-image-prefix", TEST_PREFIX)
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"{repository}:" in first.stdout or f"{repository} up to date" in first.stdout
        assert f"docker run --rm -p 8000:8000 {repository}" in first.stdout
        second = setup_serve(LAKE, "--serve-image-prefix", TEST_PREFIX)
        assert second.returncode == 0 and f"{repository} up to date" in second.stdout, second

        port = free_port()
        container = client.containers.run(
            f"{repository}:latest", ["--max-sessions", "4"], detach=True,
            ports={"8000/tcp": ("127.0.0.1", port)},
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, container)
        env = gym.make("rllm/Remote-v0", url=url, env=LAKE)
        try:
            for seed in (0, 3, 11):
                assert play(env, seed, MOVES) == play_in_process(LAKE, seed, MOVES)
            env.reset(seed=5)  # a session is open when docker stop comes
            started = time.monotonic()
            container.stop(timeout=10)  # SIGTERM, then SIGKILL after 10 s
            assert container.wait(timeout=30)["StatusCode"] == 0
            assert time.monotonic() - started < 5
            _, _, terminated, truncated, info = env.step("Down")
            assert truncated and not terminated and info["failure"] == "remote"
        finally:
            env.close()
        logs = container.logs().decode()
        assert "stopped: 1 envs made, 1 closed" in logs and "Traceback" not in logs, logs
    finally:
        if container is not None:
            container.remove(force=True)
    assert not client.containers.list(all=True, filters={"ancestor": f"{repository}:latest"})
    tags = {tag for image in client.images.list(name=repository) for tag in image.tags}
    assert len(tags) == 2 and f"{repository}:latest" in tags  # this recipe's and latest
