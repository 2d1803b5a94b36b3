"""rllm-envs stands on its own: from a wheel, outside the repository, to a played episode.

The test builds a wheel of packages/rllm-envs, installs it with ``[swe,code]`` into a fresh
virtual environment in a temporary folder (pip fetches the dependencies from the index, through
its cache, under the repository's constraints), runs ``rllm-envs setup code swe`` from that
environment under fresh image names, and plays one rllm/SWE-v0 and one rllm/Code-v0 episode
with that environment's Python, from a folder outside the repository, with no PYTHONPATH: only
what the wheel holds can be used. The fresh images are removed at the end, failures included.

What caching saves, and why the run is still the user's: every stage runs its own code under the
fresh names (engine check, recipes, ``docker build`` of the sandbox image, the SWE base and every
project image). Three things are reused rather than made again: the Debian rootfs image, which
setup finds under its usual name (it is the only input the test shares; a debootstrap would add
a minute and test the mirror, not the package), the download cache of pinned files (each checked
against its sha256 when reused), and Docker's layer cache, which replays a build step only when
its parent image, instruction and files are byte-identical to one already built. A second setup
run must then build nothing: that is the idempotence users rely on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from tests.envs.swe_support import docker_client
from tests.envs.test_code import ADD_TASK

pytestmark = [pytest.mark.slow, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "packages" / "rllm-envs"
CONSTRAINTS = REPO / "constraints.txt"
# Inherited variables that would let the fresh environment see the repository or this venv, or
# name other images than the fresh ones.
LEAKY_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
IMAGE_VARIABLES = ("RLLM_SANDBOX_IMAGE", "RLLM_ROOTFS_IMAGE", "RLLM_SWE_IMAGE_PREFIX")
# Files a user's setup and episodes need from the wheel, beyond Python modules.
WHEEL_MUST_HOLD = (
    "rllm_envs/sandbox/Dockerfile",
    "rllm_envs/sandbox/container_server.py",
    "rllm_envs/swe/testbed_runner.py",
    "rllm_envs/swe/data/test.jsonl",
    "rllm_envs/code/data/mbpp.jsonl",
    "rllm_envs_autoregister.pth",
)

EPISODES = textwrap.dedent(
    '''
    """One rllm/SWE-v0 and one rllm/Code-v0 episode, as a user of the installed package plays
    them: no `import rllm_envs` (the installed start-up hook registers the ids)."""
    import json
    import os
    import sys

    import gymnasium as gym


    def call(name, **arguments):
        return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


    results = {"pid": os.getpid()}
    swe = gym.make("rllm/SWE-v0", split="test", pool_spares=0, max_turns=10)
    try:
        observation, info = swe.reset(seed=0)
        row = next(r for r in swe.unwrapped.tasks if r["instance_id"] == info["task_id"])
        results["swe_reset"] = {
            "statement_shown": row["problem_statement"].strip() in observation,
            "tools": [tool["function"]["name"] for tool in info["tools"]],
            "image": swe.unwrapped.swe_task.image,
        }
        swe.step(call("create", path="/tmp/fix.patch", content=row["patch"]))
        applied = swe.step(call("bash", command="git apply /tmp/fix.patch && git diff --stat"))
        _, reward, terminated, truncated, info = swe.step(call("submit"))
        results["swe_fixed"] = {
            "applied": "exit code: 0" in applied[0],
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "is_correct": info["is_correct"],
            "tests": [info["tests_passed"], info["tests_total"]],
        }
        swe.reset(seed=0)
        _, reward, terminated, _, info = swe.step(call("submit"))
        results["swe_untouched"] = {"reward": reward, "is_correct": info["is_correct"]}
    finally:
        swe.close()

    with open(sys.argv[1], encoding="utf-8") as handle:
        add = json.load(handle)  # a task row: add(a, b), three hidden tests
    code = gym.make("rllm/Code-v0", tasks=[add], backend="docker")
    try:
        observation, info = code.reset(seed=0)
        results["code_prompt_shown"] = add["prompt"] in observation
        solution = "```python\\ndef add(a, b):\\n    return a + b\\n```"
        _, reward, terminated, _, info = code.step(solution)
        results["code_solved"] = {
            "reward": reward,
            "terminated": terminated,
            "is_correct": info["is_correct"],
            "tests": [info["tests_passed"], info["tests_total"]],
            "image": info["sandbox_policy"]["image"],
        }
        code.reset(seed=0)
        _, reward, terminated, _, info = code.step("```python\\ndef add(a, b):\\n    return a - b\\n```")
        results["code_wrong"] = {"reward": reward, "is_correct": info["is_correct"]}
    finally:
        code.close()

    import rllm_envs

    results["package_file"] = rllm_envs.__file__
    print(json.dumps(results))
    '''
)


def clean_environment(**extra: str) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in LEAKY_VARIABLES and key not in IMAGE_VARIABLES
    }
    environment["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return {**environment, **extra}


def run(argv: list[str], cwd: Path, environment: dict[str, str], timeout: float) -> str:
    completed = subprocess.run(
        argv,
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert completed.returncode == 0, (
        f"{' '.join(map(str, argv[:4]))} ... exited {completed.returncode}\n"
        f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


def build_wheel(folder: Path, environment: dict[str, str]) -> Path:
    """A wheel of a copy of the package (the build leaves its by-products in the copy)."""
    source = folder / "rllm-envs"
    shutil.copytree(
        PACKAGE, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    )
    dist = folder / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(dist), str(source)],
        folder,
        environment,
        timeout=300,
    )
    (wheel,) = dist.glob("rllm_envs-*.whl")
    return wheel


def remove_fresh_images(client, sandbox_tag: str, swe_prefix: str) -> list[str]:
    """Untag every image named by this test; an image goes only when no other name holds it."""
    removed = []
    for image in client.images.list():
        for tag in image.tags:
            if tag == sandbox_tag or tag.startswith(swe_prefix):
                try:
                    client.images.remove(tag)
                    removed.append(tag)
                except Exception:  # already gone
                    pass
    return removed


def test_an_installed_wheel_sets_up_and_plays_swe_and_code(tmp_path):
    client = docker_client()
    fresh = f"rllm-standalone-{uuid.uuid4().hex[:8]}"
    sandbox_tag, swe_prefix = f"rllm-sandbox:{fresh}", f"{fresh}/"
    work = tmp_path / "work"  # outside the repository: only the wheel's files can be found
    work.mkdir()
    environment = clean_environment()
    seconds: dict[str, float] = {}
    started = time.monotonic()
    try:
        wheel = build_wheel(tmp_path, environment)
        seconds["wheel"] = time.monotonic() - started
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
            assert "rllm-envs = rllm_envs.setup.cli:main" in archive.read(entry_points).decode()
        assert not [name for name in WHEEL_MUST_HOLD if name not in names]

        mark = time.monotonic()
        venv = tmp_path / "venv"
        run([sys.executable, "-m", "venv", str(venv)], work, environment, timeout=120)
        python, command = venv / "bin" / "python", venv / "bin" / "rllm-envs"
        run(
            [str(python), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS)]
            + [f"{wheel}[swe,code]"],
            work,
            environment,
            timeout=600,
        )
        seconds["install"] = time.monotonic() - mark

        mark = time.monotonic()
        setup = [str(command), "setup", "code", "swe", "--sandbox-image", sandbox_tag]
        setup += ["--swe-image-prefix", swe_prefix]
        first = run(setup, work, environment, timeout=600)
        seconds["setup"] = time.monotonic() - mark
        assert "ready: code, swe" in first and f"built {sandbox_tag}" in first
        assert f"{swe_prefix}base:1 " in first and "10 project images" in first
        mark = time.monotonic()
        again = run(setup, work, environment, timeout=300)
        seconds["setup_again"] = time.monotonic() - mark
        assert f"{sandbox_tag} up to date" in again and "(0 built, 10 up to date)" in again

        # The envs find the fresh images through the variables setup's options default to.
        mark = time.monotonic()
        script, task = work / "episodes.py", work / "add_task.json"
        script.write_text(EPISODES)
        task.write_text(json.dumps(ADD_TASK))
        played = clean_environment(RLLM_SANDBOX_IMAGE=sandbox_tag, RLLM_SWE_IMAGE_PREFIX=swe_prefix)
        output = run([str(python), str(script), str(task)], work, played, timeout=600)
        seconds["episodes"] = time.monotonic() - mark
        results = json.loads(output.strip().splitlines()[-1])

        assert Path(results["package_file"]).is_relative_to(venv)
        reset = results["swe_reset"]
        assert reset["statement_shown"] and reset["tools"][-1] == "submit"
        assert reset["image"].startswith(swe_prefix)
        fixed = results["swe_fixed"]
        assert fixed["applied"] and fixed["reward"] == 1.0 and fixed["is_correct"]
        assert fixed["terminated"] and not fixed["truncated"]
        assert fixed["tests"][0] == fixed["tests"][1] > 0
        assert results["swe_untouched"] == {"reward": 0.0, "is_correct": False}
        assert results["code_prompt_shown"]
        assert results["code_solved"] == {
            "reward": 1.0,
            "terminated": True,
            "is_correct": True,
            "tests": [3, 3],
            "image": sandbox_tag,
        }
        assert results["code_wrong"]["reward"] == 0.0 and not results["code_wrong"]["is_correct"]
        left = client.containers.list(
            all=True, filters={"label": "rllm.sandbox=1"}, ignore_removed=True
        )
        owner = f":{results['pid']}"
        assert not [c for c in left if c.labels.get("rllm.sandbox.owner", "").endswith(owner)]
    finally:
        mark = time.monotonic()
        removed = remove_fresh_images(client, sandbox_tag, swe_prefix)
        seconds["cleanup"] = time.monotonic() - mark
        print(
            "standalone seconds: "
            + ", ".join(f"{stage} {value:.1f}" for stage, value in seconds.items())
            + f", total {time.monotonic() - started:.1f}; removed {len(removed)} fresh tags"
        )
    assert not remove_fresh_images(client, sandbox_tag, swe_prefix)
    assert sandbox_tag in removed and len(removed) == 12  # sandbox, SWE base, 10 projects
