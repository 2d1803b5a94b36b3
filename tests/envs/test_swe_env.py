"""rllm/SWE-v0 in real containers: the repository at reset, the tools, limits, hostile actions,
the turn limit, infrastructure failures, and containers never left behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.swe.containers import ContainerSettings, WorkspacePool
from rllm_envs.swe.env import DEFAULT_POLICY
from rllm_envs.swe.integrity import bash, call
from rllm_envs.swe.tasks import to_swe_task

from tests.envs.swe_support import FAST_POLICY, require_images, shipped_rows, swe_containers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toolz_rows():
    rows = [row for row in shipped_rows("train") if row["repo"] == "toolz"]
    require_images({row["image_name"] for row in rows})
    return rows


@pytest.fixture(scope="module")
def env(toolz_rows):
    made = gym.make("rllm/SWE-v0", tasks=toolz_rows, policy=FAST_POLICY, max_turns=40)
    yield made
    made.close()


def step(env, action):
    observation, reward, terminated, truncated, info = env.step(action)
    return observation, reward, terminated, truncated, info


def run(env, command):
    """A bash call's output (with its "exit code: N" line), without the tool_response tags."""
    observation = step(env, bash(command))[0]
    return observation.split("\n", 1)[1].rsplit("\n</tool_response>", 1)[0]


def test_reset_gives_the_buggy_repository_as_a_fresh_one_commit_repo(env, toolz_rows):
    row = toolz_rows[0]
    task = to_swe_task(row)
    observation, info = env.reset(options={"task": row})
    assert info["task_id"] == row["instance_id"] and info["instance_id"] == row["instance_id"]
    assert row["problem_statement"].strip() in observation
    assert [tool["function"]["name"] for tool in info["tools"]][-1] == "submit"
    assert info["sandbox_policy"]["network"] is False and "uid" in info["sandbox_policy"]["user"]
    history = run(
        env,
        "git log --all --format='%H %an <%ae> %ad %s' --date=iso-strict; "
        "echo reflog=$(git reflog | wc -l) changes=$(git status --short | wc -l) "
        "commits=$(git rev-list --all | wc -l) user=$(id -u) dir=$(pwd); "
        "git count-objects -v | grep -E '^(garbage|size-garbage):'",
    )
    assert "rllm <rllm@localhost> 2000-01-01T00:00:00+00:00 Initial commit" in history
    assert "reflog=1 changes=0 commits=1 user=65432 dir=/testbed" in history
    assert "garbage: 0" in history
    hidden = " ".join(task.hidden_files)
    missing = run(env, f"ls {hidden}; find . -name __pycache__ -o -name .pytest_cache | wc -l")
    assert "No such file or directory" in missing and missing.rstrip().endswith("0")
    # The buggy state: the gold patch applies forward, exactly.
    step(env, call("create", path="/tmp/gold.patch", content=row["patch"]))
    assert "exit code: 0" in run(env, "git apply --check /tmp/gold.patch")
    # The same seed draws the same task.
    first = env.reset(seed=3)[1]["task_id"]
    assert env.reset(seed=3)[1]["task_id"] == first


def test_file_tools(env, toolz_rows):
    env.reset(options={"task": toolz_rows[0]})
    listing = step(env, call("view", path="."))[0]
    assert "toolz/itertoolz.py" in listing and ".git" not in listing
    head = step(env, call("view", path="toolz/itertoolz.py", start_line=2, end_line=3))[0]
    assert head.splitlines()[1:3] == ["2\timport heapq", "3\timport collections"]
    created = step(env, call("create", path="scratch/new.py", content="a = 1\nb = 1\n"))
    assert "Created scratch/new.py (2 lines)" in created[0]
    again = step(env, call("create", path="scratch/new.py", content="x"))
    assert 'status="error"' in again[0] and "already exists" in again[0]
    twice = step(env, call("str_replace", path="scratch/new.py", old_str="= 1", new_str="= 2"))
    assert "occurs 2 times" in twice[0] and 'status="error"' in twice[0]
    once = step(env, call("str_replace", path="scratch/new.py", old_str="b = 1", new_str="b = 3"))
    assert "Edited scratch/new.py" in once[0] and "b = 3" in once[0]
    absent = step(env, call("str_replace", path="scratch/new.py", old_str="zzz", new_str=""))
    assert "was not found" in absent[0]
    found = step(env, call("search", pattern="def sliding_window", path="toolz"))[0]
    assert "toolz/itertoolz.py:" in found
    assert "No matches" in step(env, call("search", pattern="no such text anywhere 42"))[0]
    missing = step(env, call("view", path="nope.py"))[0]
    assert "does not exist" in missing
    several = step(env, bash("echo one") + bash("exit 3"))
    assert several[0].count("<tool_response") == 2 and "exit code: 3" in several[0]
    assert several[4]["tool_calls"] == ["bash", "bash"] and several[4]["output_tokens"] > 0


def test_limits_timeouts_and_invalid_actions_keep_the_episode_going(toolz_rows):
    env = gym.make(
        "rllm/SWE-v0",
        tasks=toolz_rows[:1],
        policy=dict(FAST_POLICY, max_output_bytes=64 * 1024),
        command_timeout=2,
        max_output_chars=1000,
    )
    try:
        env.reset(seed=0)
        slept = step(env, bash("echo started; sleep 30"))
        assert "[timed out after 2 s: the command was killed]" in slept[0] and "started" in slept[0]
        assert not (slept[2] or slept[3])
        flood = step(env, bash("yes rllm | head -c 1000000"))[0]
        assert "[output limit of 65536 bytes reached: the command was stopped]" in flood
        long = step(env, bash("seq 1 5000"))[0]
        assert "characters of output cut ...]" in long and long.rstrip().endswith(
            "5000\n</tool_response>".rstrip()
        )
        invalid = step(env, "I think the bug is in merge().")
        assert invalid[4]["action_valid"] is False and "Invalid action" in invalid[0]
        assert "exit code: 0" in step(env, bash("echo alive"))[0]
    finally:
        env.close()


def test_hostile_actions_are_contained(env, toolz_rows):
    env.reset(options={"task": toolz_rows[0]})
    bomb = step(env, bash(":(){ :|:& };:"))
    assert not (bomb[2] or bomb[3])
    assert "exit code: 0" in run(env, "echo still here")
    outside = run(env, "echo x > /etc/rllm; touch /usr/lib/rllm; echo y > /root/x; ls /etc/rllm")
    assert outside.count("Permission denied") >= 3 and "No such file" in outside
    network = run(
        env,
        "python3 -c \"import urllib.request; urllib.request.urlopen('http://1.1.1.1', timeout=3)\""
        " 2>&1 | tail -1; getent hosts pypi.org || echo no-dns",
    )
    assert "unreachable" in network.lower() or "error" in network.lower()
    assert "no-dns" in network
    wiped = run(env, "rm -rf / --no-preserve-root 2>&1 | tail -2; ls /usr/bin/python3 /testbed")
    assert "Permission denied" in wiped and "/usr/bin/python3" in wiped
    memory = run(env, "python3 -c 'x = bytearray(4 << 30)'")
    assert "MemoryError" in memory
    assert "exit code: 0" in run(env, "echo the episode goes on")


def test_turn_limit_grades_the_repository_as_it_is(toolz_rows):
    row = toolz_rows[1]
    env = gym.make("rllm/SWE-v0", tasks=[row], policy=FAST_POLICY, max_turns=3)
    try:
        env.reset(seed=0)
        step(env, call("create", path="/tmp/gold.patch", content=row["patch"]))
        step(env, bash("git apply /tmp/gold.patch"))
        observation, reward, terminated, truncated, info = step(env, bash("git diff --stat"))
        assert truncated and not terminated and reward == 1.0 and info["is_correct"]
        assert info["ended_by"] == "turn_limit" and "turn limit" in observation
        assert info["tests_passed"] == info["tests_total"] == len(to_swe_task(row).graded_tests)
        after = step(env, bash("ls"))
        assert after[3] and after[4]["action_valid"] is False
    finally:
        env.close()


def test_infrastructure_failures_end_the_episode_without_a_fake_reward(toolz_rows):
    client = require_images([])
    env = gym.make("rllm/SWE-v0", tasks=toolz_rows[:1], policy=FAST_POLICY)
    try:
        env.reset(seed=0)
        client.containers.get(env.unwrapped.workspace.id).kill()
        observation, reward, terminated, truncated, info = step(env, bash("ls"))
        assert info["failure"] == "sandbox" and truncated and reward == 0.0
        assert "not your fault" in observation
        missing_image = dict(toolz_rows[0], image_name="rllm-swe/no-such-project:0")
        observation, info = env.reset(options={"task": missing_image})
        assert info["failure"] == "sandbox" and "rllm-envs setup swe" in observation
        wrong_snapshot = dict(toolz_rows[0], base="0000000000000000")
        observation, info = env.reset(options={"task": wrong_snapshot})
        assert info["failure"] == "sandbox" and "snapshot" in observation
    finally:
        env.close()


def _owned_containers(client, pid: int) -> list:
    return [
        container
        for container in swe_containers(client)
        if container.labels.get("rllm.sandbox.owner", "").endswith(f":{pid}")
    ]


def test_close_and_garbage_collection_leave_no_container(toolz_rows):
    client = require_images([])

    def alive(ids):
        return ids & {container.id for container in swe_containers(client)}

    env = gym.make("rllm/SWE-v0", tasks=toolz_rows[:1], policy=FAST_POLICY, pool_spares=1)
    env.reset(seed=0)
    env.unwrapped.pool.prewarm(toolz_rows[0]["image_name"])
    ids = set(env.unwrapped.pool.container_ids)
    assert alive(ids)
    env.close()
    env.close()  # idempotent
    assert not alive(ids)
    dropped = gym.make("rllm/SWE-v0", tasks=toolz_rows[:1], policy=FAST_POLICY).unwrapped
    dropped.reset(seed=0)
    pool = dropped.pool
    ids = set(pool.container_ids)
    del dropped
    pool._finalizer()  # what garbage collection or interpreter exit runs
    assert ids and not alive(ids)


CRASHING_OWNER = textwrap.dedent(
    """
    import json, os, signal, sys
    import gymnasium as gym
    import rllm_envs
    rows = [json.loads(line) for line in sys.stdin]
    env = gym.make("rllm/SWE-v0", tasks=rows, pool_spares=1)
    env.reset(seed=0)
    env.unwrapped.pool.take(rows[0]["image_name"])  # and a container in use by grading
    print(os.getpid(), flush=True)
    {ending}
    """
)


@pytest.mark.parametrize(
    "ending",
    [
        "os.kill(os.getpid(), signal.SIGKILL)",
        "raise RuntimeError('crash')",
        "sys.exit(0)  # never closed",
    ],
    ids=["sigkill", "exception", "no-close"],
)
def test_owner_death_leaves_nothing_for_long(toolz_rows, ending):
    client = require_images([])
    process = subprocess.run(
        [sys.executable, "-c", CRASHING_OWNER.format(ending=ending)],
        input=json.dumps(toolz_rows[0]) + "\n",
        capture_output=True,
        text=True,
        timeout=180,
    )
    pid = int(process.stdout.split()[0])
    if ending.startswith("os.kill"):
        assert process.returncode == -signal.SIGKILL
        assert _owned_containers(client, pid)  # SIGKILL runs no clean-up: they are there
        WorkspacePool(ContainerSettings(DEFAULT_POLICY), spares=0).close()  # a new start sweeps
    assert _owned_containers(client, pid) == []
