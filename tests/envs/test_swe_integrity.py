"""The reward of rllm/SWE-v0 cannot be gamed: on a documented sample of the test split the gold
patch scores 1.0, doing nothing 0.0, and every cheat 0.0, with no hidden test, fixed source or
trace of the fix reachable from the agent's container.

The sample: the first two instances (by id) of every test-split project, gold and no-op on each,
and each cheat on one of them in turn. ``benchmarks/swe_integrity.py`` runs everything over the
whole split (figures in docs/envs/swe.md).
"""

from __future__ import annotations

import base64

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.swe.grading import run_graded_tests
from rllm_envs.swe.integrity import (
    _FORGING_CONFTEST,
    CHEATS,
    bash,
    leaks,
    play,
    secrets_for,
    secrets_of,
)
from rllm_envs.swe.tasks import to_swe_task

from tests.envs.swe_support import FAST_POLICY, require_images, sample_rows

pytestmark = pytest.mark.slow

SAMPLE = sample_rows("test", per_project=2)
CHEAT_CASES = [(name, SAMPLE[index % len(SAMPLE)]) for index, name in enumerate(CHEATS) if SAMPLE]


@pytest.fixture(scope="module")
def env():
    require_images({row["image_name"] for row in SAMPLE})
    made = gym.make("rllm/SWE-v0", tasks=SAMPLE, policy=FAST_POLICY)
    yield made
    made.close()


@pytest.mark.parametrize("row", SAMPLE, ids=[row["instance_id"] for row in SAMPLE])
def test_gold_patch_scores_one_and_doing_nothing_scores_zero(env, row):
    gold = play(env, row, "gold")
    assert gold.failure is None and gold.reward == 1.0, gold.info.get("reason")
    assert gold.info["patch_applied"] and not gold.info["dropped_files"]
    assert set(gold.info["test_results"].values()) == {"passed"}
    noop = play(env, row, "noop")
    assert noop.failure is None and noop.reward == 0.0 and noop.info["patch"] == ""
    task = to_swe_task(row)
    results = noop.info["test_results"]
    assert all(results[test] != "passed" for test in task.fail_to_pass)
    assert all(results[test] == "passed" for test in task.pass_to_pass)


@pytest.mark.parametrize(("cheat", "row"), CHEAT_CASES, ids=[name for name, _ in CHEAT_CASES])
def test_cheats_score_zero_and_find_nothing(env, cheat, row):
    secrets = secrets_for(env.unwrapped.pool, to_swe_task(row))
    assert secrets.sha256 and secrets.git_blobs
    played = play(env, row, cheat, secrets)
    assert played.failure is None, played.observations[-1]
    assert played.reward == 0.0 and played.info["is_correct"] is False, played.info.get("reason")
    assert leaks(played, secrets) == []


def test_the_leak_search_does_find_what_is_there(env):
    # A positive control: the file hunt must report a file the container does hold.
    row = SAMPLE[0]
    env.reset(options={"task": row})
    visible = env.step(bash("cat README* | head -c 100000 | sha256sum"))[0]
    readme = env.step(bash("base64 -w0 README*"))[0].split("\n")[2]
    planted = secrets_of([base64.b64decode(readme)])
    assert next(iter(planted.sha256)) in visible
    played = play(env, row, "hunt_hidden_files", planted)
    assert any(line.startswith("LEAK ") and "README" in line for line in leaks(played, planted))
    played = play(env, row, "git_history", planted)
    assert any(line.startswith("LEAK ") for line in leaks(played, planted))


def _new_file(path: str, content: str) -> str:
    lines = content.splitlines(keepends=True)
    body = "".join(f"+{line}" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def test_the_conftest_cheat_would_work_on_a_grader_that_kept_it(env):
    # The conftest.py the cheat agent writes, applied straight to the grading container (no
    # filtering): its forged reports resolve the task. The env drops it, so it earns 0.
    # (The start-up hook cheats are inert even unfiltered: the isolated interpreter finds the
    # system's sitecustomize first and has no user site.)
    task = to_swe_task(SAMPLE[0])
    patch = _new_file("conftest.py", _FORGING_CONFTEST)
    grade = run_graded_tests(env.unwrapped.pool, task, patch, timeout=120)
    assert grade.resolved, grade.reason
