"""rllm/Harbor-v0 on real Docker: every shipped task's oracle scores 1.0 and an untouched
submit 0.0; a planted reward, planted tests or a process left writing rewards score 0.0; bad
input gets clear errors; no container outlives its env."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import gymnasium as gym
import pytest
from rllm_envs.harbor.check import SUBMIT_UNTOUCHED, check_folder
from rllm_envs.harbor.containers import HARBOR_LABEL, image_tag
from rllm_envs.harbor.task_folder import (
    HarborTaskError,
    find_tasks,
    load_task,
    shipped_task_rows,
    shipped_tasks_dir,
)
from rllm_envs.harbor.verifier import parse_rewards, scalar_reward
from rllm_envs.sandbox.docker_backend import OWNER_LABEL, owner_tag

from tests.envs.swe_support import docker_client
from tests.parts import require_part

SHIPPED = find_tasks(shipped_tasks_dir())


def bash(command: str) -> str:
    return f"```bash\n{command}\n```"


@pytest.fixture(scope="module")
def client():
    client = docker_client()
    for path in SHIPPED:
        task = load_task(path)
        try:
            client.images.get(image_tag(task, task.environment_dir))
        except Exception:
            require_part(False, f"{task.name}'s image is missing: rllm-envs setup harbor")
    return client


def harbor_containers(client) -> list:
    """This process's Harbor containers (other test workers run their own meanwhile)."""
    labels = [HARBOR_LABEL, f"{OWNER_LABEL}={owner_tag()}"]
    return client.containers.list(all=True, filters={"label": labels}, ignore_removed=True)


def orphaned_containers(client) -> list:
    """Harbor containers of this machine whose owner process is gone (leaked)."""
    listed = client.containers.list(all=True, filters={"label": HARBOR_LABEL}, ignore_removed=True)
    return [
        container
        for container in listed
        if (owner := container.labels.get(OWNER_LABEL, "")).startswith(socket.gethostname() + ":")
        and not pid_alive(int(owner.rpartition(":")[2]))
    ]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def test_about_ten_tasks_ship_in_both_verifier_modes():
    tasks = [load_task(path) for path in SHIPPED]
    assert len(tasks) >= 10
    assert {task.verifier_mode for task in tasks} == {"shared", "separate"}
    assert all(task.has_oracle and not task.allow_internet for task in tasks)
    assert [row["task_dir"] for row in shipped_task_rows()] == [str(path) for path in SHIPPED]


@pytest.mark.parametrize("folder", SHIPPED, ids=[path.name for path in SHIPPED])
def test_oracle_scores_one_and_an_untouched_submit_zero(client, folder):
    (check,) = check_folder(folder)
    assert check.oracle_reward == 1.0, check
    assert check.untouched_reward == 0.0, check
    assert check.passed


PLANTS = (
    # A reward written where the tests write theirs, tests of the agent's own, and a process
    # that keeps writing a perfect reward while the real tests run.
    "mkdir -p /logs/verifier /tests /logs/artifacts && echo 1 > /logs/verifier/reward.txt && "
    "echo '{\"reward\": 1}' > /logs/verifier/reward.json && "
    "printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh && "
    "echo 1 > /logs/artifacts/reward.txt",
    "nohup bash -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
    " sleep 0.05; done' >/dev/null 2>&1 &",
)


@pytest.mark.parametrize("mode", ["shared", "separate"])
def test_a_faked_reward_scores_zero(client, mode):
    folder = next(path for path in SHIPPED if load_task(path).verifier_mode == mode)
    env = gym.make("rllm/Harbor-v0", tasks=str(folder))
    try:
        env.reset(seed=0)
        for plant in PLANTS:
            observation, *_ = env.step(bash(plant))
            assert "exit code: 0" in observation, observation
        _, reward, terminated, _, info = env.step(SUBMIT_UNTOUCHED)
    finally:
        env.close()
    assert terminated and reward == 0.0, info
    assert info["rewards"] == {"reward": 0.0} and "verifier_error" not in info, info
    assert not harbor_containers(client)


def test_turns_tools_timeouts_and_bad_actions(client):
    folder = next(path for path in SHIPPED if load_task(path).verifier_mode == "shared")
    env = gym.make("rllm/Harbor-v0", tasks=str(folder), command_timeout=1, max_turns=5)
    try:
        observation, info = env.reset(seed=0)
        assert load_task(folder).instruction.strip()[:40] in observation
        assert {"bash", "submit"} <= {tool["function"]["name"] for tool in info["tools"]}
        observation, reward, terminated, truncated, info = env.step("no tool call here")
        assert info["action_valid"] is False and not (terminated or truncated)
        observation, *_ = env.step(bash("sleep 5; echo late"))
        assert "timed out after 1 s" in observation and "late" not in observation
        observation, *_ = env.step(bash("pwd; exit 3"))
        assert "exit code: 3" in observation and "/app" in observation
        call = '<tool_call>{"name": "view", "arguments": {"path": "."}}</tool_call>'
        observation, *_ = env.step(call)
        assert "tool_response" in observation
        # The last turn ends the episode, graded: truncated, not terminated.
        observation, reward, terminated, truncated, info = env.step(bash("true"))
        assert truncated and not terminated and info["ended_by"] == "turn_limit"
        assert reward == 0.0 and "The tests ran" in observation
        assert env.step(bash("true"))[4]["action_valid"] is False  # the episode is over
    finally:
        env.close()
    assert not harbor_containers(client)


def test_bad_task_folders_are_clear_errors(tmp_path):
    with pytest.raises(HarborTaskError, match="no task.toml"):
        load_task(tmp_path)
    with pytest.raises(HarborTaskError, match="holds no Harbor task"):
        find_tasks(tmp_path)
    (tmp_path / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n")
    (tmp_path / "instruction.md").write_text("Do it.")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("true")
    with pytest.raises(HarborTaskError, match="neither"):
        load_task(tmp_path)
    (tmp_path / "task.toml").write_text(
        "[verifier]\ntimeout_sec = -1\n[environment]\ndocker_image = 'x'\n"
    )
    with pytest.raises(HarborTaskError, match="timeout_sec must be a positive number"):
        load_task(tmp_path)
    (tmp_path / "task.toml").write_text("[[steps]]\nname = 'a'\n")
    with pytest.raises(HarborTaskError, match="multi-step"):
        load_task(tmp_path)
    (tmp_path / "task.toml").write_text("not = [toml")
    with pytest.raises(HarborTaskError, match="not valid TOML"):
        load_task(tmp_path)


def test_reward_files_are_read_as_harbor_reads_them():
    assert parse_rewards("1\n", "txt") == {"reward": 1.0}
    assert parse_rewards('{"reward": 0.75, "style": 1}', "json") == {"reward": 0.75, "style": 1.0}
    assert scalar_reward({"reward": 0.75, "style": 1.0}) == 0.75
    assert scalar_reward({"a": 1.0, "b": 0.0}) == 0.5
    for text, kind in (("NaN", "txt"), ("", "txt"), ('{"reward": true}', "json"), ("[]", "json")):
        with pytest.raises(ValueError):
            parse_rewards(text, kind)


def test_the_dataset_registry_knows_harbor_folders(client, tmp_path, monkeypatch):
    from rllm_envs import DatasetRegistry

    monkeypatch.setenv("RLLM_DATASETS_DIR", str(tmp_path))
    shipped = DatasetRegistry.load_dataset("harbor", "test")
    assert [row["task_dir"] for row in shipped] == [str(path) for path in SHIPPED]
    registered = DatasetRegistry.register_dataset("my_tasks", str(SHIPPED[0].parent), "train")
    assert len(registered) == len(SHIPPED)
    env = gym.make("rllm/Harbor-v0", tasks="registry:my_tasks")
    try:
        assert len(env.unwrapped.tasks) == len(SHIPPED)
    finally:
        env.close()


@pytest.mark.slow
def test_rllm_eval_plays_harbor_tasks_with_the_embedded_model(client, tmp_path):
    from rllm_agents.types import Episode

    output = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "rllm_agents.cli.eval", "--env", "rllm/Harbor-v0",
         "--env-kwargs", '{"max_turns": 2}', "--model", "smollm2", "--num-tasks", "2",
         "--max-turns", "2", "--max-tokens", "64", "--output", str(output), "--no-progress"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["errors"] == 0 and summary["infra_failures"] == 0
    for line in (output / "episodes.jsonl").read_text().splitlines():
        last = Episode.from_json(line).trajectories[0].steps[-1]
        # The episode ended in the env, whose tests graded what the model left.
        assert last.info["ended_by"] in ("turn_limit", "submit") and "rewards" in last.info
        assert last.reward == last.info["rewards"]["reward"]
    assert not orphaned_containers(client)  # the command removed its containers on exit
