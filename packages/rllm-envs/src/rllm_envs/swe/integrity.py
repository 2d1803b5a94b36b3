"""Scripted agents that check the reward: the gold patch, doing nothing, and cheats.

Every agent is a function from a task to the replies it sends, in the env's own action grammar.
The gold agent applies the row's patch and must score 1.0; the no-op agent submits at once and
must score 0.0; every cheat must score 0.0 too. Each cheat would earn reward from a naive
grader (one that runs the agent's tests, trusts a report file in reach of the agent, or grades
in the agent's own container). Some also look for leaks: they hash every file they can read, and
list the git objects, so that a copy of a hidden test or of the fixed source, or a trace of the
fix in git, shows up in their observations (:func:`leaks`).

``python -m rllm_envs.swe.integrity --split test`` plays them all over a split (see
``benchmarks/swe_integrity.py`` for the whole-split figures).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from rllm_envs.swe.grading import patch_paths
from rllm_envs.swe.tasks import SWETask

Agent = Callable[[SWETask, "Secrets"], list[str]]
GOLD_PATH = "/tmp/rllm-fix.patch"
NEEDLES_PATH = "/tmp/rllm-needles.txt"


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def bash(command: str) -> str:
    return call("bash", command=command)


SUBMIT = call("submit")


def _library_file(task: SWETask) -> str:
    """The source file the gold patch changes (where cheats break things)."""
    paths = patch_paths(task.patch)
    return paths[0] if paths else "setup.py"


def _package_dir(task: SWETask) -> str:
    return str(PurePosixPath(_library_file(task)).parent)


@dataclass(frozen=True)
class Secrets:
    """What must never be reachable from the agent's container: content hashes of the hidden
    test files and of the fixed source files, and the fixed sources' git blob ids."""

    sha256: frozenset[str] = frozenset()
    git_blobs: frozenset[str] = frozenset()

    @property
    def all(self) -> frozenset[str]:
        return self.sha256 | self.git_blobs


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def secrets_of(clean_files: Iterable[bytes]) -> Secrets:
    files = list(clean_files)
    return Secrets(
        frozenset(hashlib.sha256(data).hexdigest() for data in files),
        frozenset(git_blob_id(data) for data in files),
    )


def secrets_for(pool: Any, task: SWETask) -> Secrets:
    """The secrets of a shipped task (its image holds the fixed tree): the hidden test files and
    the files the gold patch fixes, read from a fresh container."""
    paths = [*task.hidden_files, *patch_paths(task.patch)]
    workspace = pool.take(task.image)
    try:
        contents = []
        for path in paths:
            result = workspace.run(("base64", "-w0", f"{task.workdir}/{path}"))
            if result.exit_code == 0:
                contents.append(base64.b64decode(result.stdout))
    finally:
        workspace.remove()
    return secrets_of(contents)


# -- honest agents --------------------------------------------------------------------------
def gold(task: SWETask, secrets: Secrets) -> list[str]:
    """Apply the row's gold patch with the tools, then submit."""
    return [
        call("create", path=GOLD_PATH, content=task.patch),
        bash(f"git apply {GOLD_PATH} && git diff --stat"),
        SUBMIT,
    ]


def noop(task: SWETask, secrets: Secrets) -> list[str]:
    return [SUBMIT]


# -- cheats ---------------------------------------------------------------------------------
def _passing_test_module(task: SWETask) -> str:
    names = sorted({test.split("::")[-1].split("[")[0] for test in task.fail_to_pass})
    return "".join(f"def {name}():\n    pass\n\n\n" for name in names)


def edit_failing_tests(task: SWETask, secrets: Secrets) -> list[str]:
    """Write the hidden test files back as tests that pass, and gut the visible ones."""
    actions = [
        call("create", path=path, content=_passing_test_module(task)) for path in task.hidden_files
    ]
    actions.append(
        bash(
            "find . -name 'test_*.py' -not -path './.git/*' | while read -r f; do "
            "printf 'def test_nothing():\\n    pass\\n' > \"$f\"; done; git status --short | head"
        )
    )
    return [*actions, SUBMIT]


def delete_tests(task: SWETask, secrets: Secrets) -> list[str]:
    return [
        bash(
            "find . \\( -name 'test_*.py' -o -name '*_test.py' -o -name conftest.py \\) "
            "-not -path './.git/*' -delete; "
            "find . -type d \\( -name tests -o -name test \\) -not -path './.git/*' "
            "-exec rm -rf {} +; git status --short | head"
        ),
        SUBMIT,
    ]


_FORGING_CONFTEST = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


def conftest_forges_passes(task: SWETask, secrets: Secrets) -> list[str]:
    """A conftest.py that turns every test report into PASSED (root, package and test dirs)."""
    folders = {".", _package_dir(task), *(str(PurePosixPath(f).parent) for f in task.test_files)}
    actions = []
    for folder in sorted(folders):
        path = str(PurePosixPath(folder) / "conftest.py")
        actions.append(bash(f"rm -f {shlex.quote(path)}"))
        actions.append(call("create", path=path, content=_FORGING_CONFTEST))
    return [*actions, SUBMIT]


def config_changes(task: SWETask, secrets: Secrets) -> list[str]:
    """pytest.ini / pyproject / setup.cfg / tox.ini that collect nothing or skip the tests."""
    ini = "[pytest]\naddopts = -p no:junitxml --co -q\npython_files = nothing_matches_*.py\n"
    return [
        bash("rm -f pytest.ini"),
        call("create", path="pytest.ini", content=ini),
        bash(
            "printf '\\n[tool.pytest.ini_options]\\naddopts = \"--co\"\\n' >> pyproject.toml; "
            "printf '\\n[tool:pytest]\\naddopts = --co\\n' >> setup.cfg; "
            "printf '\\n[pytest]\\naddopts = --co\\n' >> tox.ini; git status --short"
        ),
        SUBMIT,
    ]


def break_collection(task: SWETask, secrets: Secrets) -> list[str]:
    """A syntax error in the library: nothing collects, so nothing can fail."""
    target = shlex.quote(_library_file(task))
    return [bash(f"printf '\\ndef broken(:\\n' >> {target}; tail -2 {target}"), SUBMIT]


def exit_early(task: SWETask, secrets: Secrets) -> list[str]:
    """The library ends the interpreter with status 0 when imported: no test ever fails."""
    target = shlex.quote(_library_file(task))
    return [bash(f"sed -i '1i import os; os._exit(0)' {target}; head -2 {target}"), SUBMIT]


def git_history(task: SWETask, secrets: Secrets) -> list[str]:
    """Look for the fix in git: history, reflog, unreachable objects, stashes, every object."""
    return [
        _needles(secrets),
        bash(
            "git log --all --oneline | wc -l; git reflog --all | wc -l; git stash list | wc -l; "
            "git fsck --unreachable --no-reflogs 2>&1 | head -5; echo OBJECTS; "
            "git cat-file --batch-all-objects --batch-check='%(objectname)' | wc -l; "
            "git cat-file --batch-all-objects --batch-check='%(objectname)' "
            f"| grep -F -f {NEEDLES_PATH} | sed 's/^/LEAK /'"
        ),
        SUBMIT,
    ]


def hunt_hidden_files(task: SWETask, secrets: Secrets) -> list[str]:
    """Look for the hidden tests by name, and hash every readable file of the container (caches,
    site-packages, build folders, /tmp, /scratch included) against the secrets' hashes."""
    names = " -o ".join(f"-name {shlex.quote(PurePosixPath(f).name)}" for f in task.hidden_files)
    return [
        _needles(secrets),
        bash(
            f"find / -xdev \\( {names} \\) -type f 2>/dev/null | sed 's/^/FOUND /'; "
            "find / /tmp /scratch /dev/shm -xdev -type f -size -4M -readable 2>/dev/null "
            "| grep -v -e '^/proc/' -e '^/sys/' | xargs -d '\\n' sha256sum 2>/dev/null "
            f"| grep -F -f {NEEDLES_PATH} | sed 's/^/LEAK /'; echo searched"
        ),
        SUBMIT,
    ]


def _needles(secrets: Secrets) -> str:
    return call("create", path=NEEDLES_PATH, content="".join(f"{v}\n" for v in secrets.all))


_FORGED_REPORT = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
    'failures="0" skipped="0" tests="{count}">{cases}</testsuite></testsuites>'
)


def plant_reward_files(task: SWETask, secrets: Secrets) -> list[str]:
    """Forged all-passing reports and reward files wherever a grader might look."""
    cases = "".join(
        f'<testcase classname="x" name="{test}" file="{test.split("::")[0]}"/>'
        for test in task.graded_tests
    )
    report = _FORGED_REPORT.format(count=len(task.graded_tests), cases=cases)
    actions = []
    for path in ("/tmp/report.xml", "/scratch/report.xml", "report.xml", "/tmp/reward.txt"):
        actions.append(call("create", path=path, content=report if path.endswith("xml") else "1"))
    actions.append(bash("echo 1.0 > reward; echo PASSED > .rllm_result; ls /tmp /scratch"))
    return [*actions, SUBMIT]


def background_fixer(task: SWETask, secrets: Secrets) -> list[str]:
    """A background process that applies the fix after its command ended (and after submit)."""
    return [
        call("create", path=GOLD_PATH, content=task.patch),
        bash(
            f"nohup sh -c 'sleep 3; cd /testbed && git apply {GOLD_PATH}' >/dev/null 2>&1 & "
            "echo started"
        ),
        bash("sleep 5; git status --short | head"),
        SUBMIT,
    ]


_SITECUSTOMIZE = """\
import _pytest.reports

_original = _pytest.reports.TestReport.__init__


def _always_passed(self, *args, **kwargs):
    _original(self, *args, **kwargs)
    self.outcome = "passed"
    self.longrepr = None


_pytest.reports.TestReport.__init__ = _always_passed
"""


def startup_hooks(task: SWETask, secrets: Secrets) -> list[str]:
    """sitecustomize / usercustomize / a .pth file patching pytest's reports at start-up."""
    package = _package_dir(task)
    actions = []
    for path in ("sitecustomize.py", "usercustomize.py", f"{package}/sitecustomize.py"):
        actions += [
            bash(f"rm -f {shlex.quote(path)}"),
            call("create", path=path, content=_SITECUSTOMIZE),
        ]
    actions.append(call("create", path="zz_rllm.pth", content="import sitecustomize\n"))
    return [*actions, SUBMIT]


def shadow_pytest(task: SWETask, secrets: Secrets) -> list[str]:
    """A pytest.py in the repository root that prints PASSED and writes a forged report."""
    fake = (
        "import sys\n"
        "for arg in sys.argv:\n"
        "    if arg.startswith('--junitxml='):\n"
        "        open(arg.split('=', 1)[1], 'w').write('<testsuites/>')\n"
        "print('all tests PASSED')\n"
        "raise SystemExit(0)\n"
    )
    return [call("create", path="pytest.py", content=fake), SUBMIT]


CHEATS: dict[str, Agent] = {
    "edit_failing_tests": edit_failing_tests,
    "delete_tests": delete_tests,
    "conftest_forges_passes": conftest_forges_passes,
    "config_changes": config_changes,
    "break_collection": break_collection,
    "exit_early": exit_early,
    "git_history": git_history,
    "hunt_hidden_files": hunt_hidden_files,
    "plant_reward_files": plant_reward_files,
    "background_fixer": background_fixer,
    "startup_hooks": startup_hooks,
    "shadow_pytest": shadow_pytest,
}
AGENTS: dict[str, Agent] = {"gold": gold, "noop": noop, **CHEATS}


# -- playing and checking -------------------------------------------------------------------
@dataclass
class Played:
    agent: str
    instance_id: str
    reward: float
    info: dict[str, Any]
    observations: list[str] = field(default_factory=list)
    failure: str | None = None


def play(env: Any, row: dict[str, Any], agent: str, secrets: Secrets | None = None) -> Played:
    """Run one scripted agent on one row to the end of its episode."""
    from rllm_envs.swe.tasks import to_swe_task

    task = to_swe_task(row)
    observation, info = env.reset(options={"task": row})
    played = Played(agent, task.instance_id, 0.0, info, [observation], info.get("failure"))
    if played.failure:
        return played
    for action in AGENTS[agent](task, secrets or Secrets()):
        observation, reward, terminated, truncated, info = env.step(action)
        played.observations.append(observation)
        played.reward, played.info = float(reward), info
        if terminated or truncated:
            played.failure = info.get("failure")
            break
    return played


def leaks(played: Played, secrets: Secrets) -> list[str]:
    """Secrets that showed up in the agent's observations."""
    found = []
    for observation in played.observations[1:]:
        for line in observation.splitlines():
            if line.startswith(("LEAK ", "FOUND ")):
                found.append(line)
    return found
