"""How a program run can fail, and the Episode each failure leaves: its termination reason, its
failure kind, what the program wrote on stderr, the calls it made before it failed - and no
process of it left running. Programs talk to the tiny model through the real gateway."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.engines.base import SamplingParams
from rllm_agents.programs import ProgramExecutionEngine, command_program, failure_counts
from rllm_agents.reaper import running
from rllm_agents.types import TerminationReason

ROW = {"id": "add-2-3", "question": "What is 2 + 3?", "answer": "5"}

# Standard library only, so each run starts fast: one chat call through OPENAI_BASE_URL.
ASK_THE_MODEL = """
import json, os, sys, urllib.request
task = json.loads(sys.stdin.read())
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"],
                     "messages": [{"role": "user", "content": task["question"]}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"},
)
reply = json.load(urllib.request.urlopen(request))["choices"][0]["message"]["content"]
"""


def program(tmp_path: Path, then: str, ask: bool = True) -> object:
    script = tmp_path / "agent.py"
    script.write_text((ASK_THE_MODEL if ask else "import json, sys\n") + then)
    return command_program(f"{sys.executable} {script}")


def run(tiny_engine, agent, *, retries: int = 0, timeout: float | None = 60, rows=(ROW,)):
    runner = ProgramExecutionEngine(
        agent,
        tiny_engine,
        env_factory=lambda: gym.make("rllm/Math-v0"),
        tokenizer=tiny_engine.tokenizer,
        retry_limit=retries,
        timeout=timeout,
        sampling=SamplingParams(max_tokens=4),
    )
    return runner.run(list(rows), list(range(len(rows))))


def test_a_graded_answer_and_a_reported_reward(tmp_path, tiny_engine):
    graded = program(tmp_path, 'print(json.dumps({"answer": "\\\\boxed{5}"}))')
    [episode] = run(tiny_engine, graded)
    assert episode.termination_reason == TerminationReason.ENV_DONE
    assert episode.reward == 1.0 and episode.is_correct is True  # Math-v0's own grader
    assert episode.info["grade"]["grade"] == "correct" and episode.metrics["turns"] == 1.0

    async def scored(task, base_url, api_key):
        from openai import AsyncOpenAI

        async with AsyncOpenAI(base_url=base_url, api_key=api_key) as client:
            await client.chat.completions.create(
                model="any", messages=[{"role": "user", "content": task["question"]}]
            )
        return {"reward": 0.25, "info": {"is_correct": False, "note": "self-scored"}}

    [episode] = run(tiny_engine, scored)
    assert episode.termination_reason == TerminationReason.ENV_DONE
    assert episode.reward == 0.25 and episode.is_correct is False
    assert episode.info["program_info"]["note"] == "self-scored" and "grade" not in episode.info


def test_a_crash_is_retried_then_recorded_with_its_stderr_and_calls(tmp_path, tiny_engine):
    crashing = program(tmp_path, 'sys.stderr.write("Traceback: boom\\n"); sys.exit(3)')
    [episode] = run(tiny_engine, crashing, retries=1)
    assert episode.termination_reason == TerminationReason.ERROR
    assert episode.info["program_failure"] == "crashed"
    assert "exited with status 3" in episode.error
    assert episode.info["program_stderr"] == "Traceback: boom\n"
    assert episode.metrics["attempts"] == 2.0 and len(episode.info["attempt_errors"]) == 2
    # The call it made before crashing is kept for the record, with no reward.
    [trajectory] = episode.trajectories
    assert sum(trajectory.response_mask) >= 1 and trajectory.reward == 0.0


def test_a_function_that_raises_crashed(tiny_engine):
    async def broken(task, base_url, api_key):
        raise KeyError("question")

    [episode] = run(tiny_engine, broken)
    assert episode.info["program_failure"] == "crashed"
    assert "raised KeyError" in episode.error and episode.trajectories == []


def test_the_time_limit_kills_the_program_and_its_children(tmp_path, tiny_engine):
    pid_file = tmp_path / "child.pid"
    hanging = program(
        tmp_path,
        "import subprocess, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('thinking', file=sys.stderr, flush=True)\n"
        "time.sleep(300)\n",
    )
    started = time.monotonic()
    [episode] = run(tiny_engine, hanging, timeout=4)
    assert time.monotonic() - started < 30
    assert episode.termination_reason == TerminationReason.TIMEOUT
    assert episode.info["program_failure"] == "timeout" and "4" in episode.error
    assert episode.info["program_stderr"] == "thinking\n"
    assert len(episode.trajectories) == 1  # the call made before the limit
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(child), "the program's child outlived the time limit"


@pytest.mark.parametrize(
    "then, words",
    [
        ("print(json.dumps({'rewrad': 1}))", "unknown result keys ['rewrad']"),
        ("print(json.dumps({'reward': 'high'}))", "reward must be a number"),
        ("pass", "printed nothing"),
    ],
)
def test_unusable_output_is_bad_output(tmp_path, tiny_engine, then, words):
    episodes = run(tiny_engine, program(tmp_path, then))
    assert failure_counts(episodes) == {"bad_output": 1}
    [episode] = episodes
    assert episode.termination_reason == TerminationReason.ERROR and words in episode.error


def test_a_plain_text_last_line_is_an_answer_the_env_grades(tmp_path, tiny_engine):
    [episode] = run(tiny_engine, program(tmp_path, "print('the answer is \\\\boxed{5}')"))
    assert episode.termination_reason == TerminationReason.ENV_DONE, episode.error
    assert episode.info["answer"] == "the answer is \\boxed{5}"
    assert episode.reward == 1.0 and episode.is_correct is True  # Math-v0's own grader


def test_a_program_that_never_calls_the_model(tmp_path, tiny_engine):
    idle = program(tmp_path, 'print(json.dumps({"answer": "5"}))', ask=False)
    [episode] = run(tiny_engine, idle)
    assert episode.termination_reason == TerminationReason.ERROR
    assert episode.info["program_failure"] == "no_model_calls"
    assert "OPENAI_BASE_URL" in episode.error


def test_every_run_of_a_batch_ends_as_one_episode_in_order(tmp_path, tiny_engine):
    # Answers depend on the task: each run got its own row.
    echo = program(tmp_path, 'print(json.dumps({"answer": "\\\\boxed{" + task["answer"] + "}"}))')
    rows = [{"id": f"add-{i}", "question": f"What is {i} + 0?", "answer": str(i)} for i in range(6)]
    episodes = run(tiny_engine, echo, rows=rows)
    assert [e.info["task_key"] for e in episodes] == [row["id"] for row in rows]
    assert all(e.reward == 1.0 for e in episodes)


@pytest.mark.slow
def test_rllm_eval_stopped_by_sigterm_leaves_no_program_running(tmp_path):
    pid_file = tmp_path / "pids"
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pid_file)!r}, 'a').write(f'{{os.getpid()}} {{child.pid}}\\n')\n"
        "time.sleep(300)\n"
    )
    command = [sys.executable, "-m", "rllm_agents.cli.eval", "--env", "rllm/Math-v0"]
    command += ["--split", "gsm8k_test", "--num-tasks", "2", "--model", "tiny", "--no-progress"]
    command += ["--agent-cmd", f"{sys.executable} {agent}"]
    evaluation = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(_pids(pid_file)) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_pids(pid_file)) == 4, "both programs and their children should be running"
        evaluation.terminate()
        _, stderr = evaluation.communicate(timeout=60)
    finally:
        evaluation.kill()
    assert evaluation.returncode == 143, stderr.decode()[-2000:]
    for pid in _pids(pid_file):
        assert not running(pid), f"process {pid} outlived rllm-eval"


def _pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()] if path.exists() else []
