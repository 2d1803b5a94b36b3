"""An unmodified script that prints its answer as plain text, run by ``rllm-eval --agent-cmd``:
its last line is the answer, graded by the env, not a failed episode and not a reward.

The script asks the model through the real gateway (standard library only, as a script with no
rllm in it would); the model is a loopback OpenAI-compatible server that adds the numbers it is
asked about, wrongly for odd sums, so the env's grading decides each episode's reward.
"""

from __future__ import annotations

import json
import re
import sys

from rllm_agents.cli.eval import main
from rllm_agents.testing.fault_server import FaultServer
from rllm_agents.types import Episode, TerminationReason

PLAIN_SCRIPT = """
import json, os, sys, urllib.request
task = json.loads(sys.stdin.read())
question = f"What is {task['a']} + {task['b']}? Reply with the number only."
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"],
                     "messages": [{"role": "user", "content": question}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"},
)
reply = json.load(urllib.request.urlopen(request))["choices"][0]["message"]["content"]
print("asked:", question)
print(reply)
"""
QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def adds_wrongly_when_odd(body: dict) -> str:
    a, b = map(int, QUESTION.search(json.dumps(body)).groups())
    return str(a + b if (a + b) % 2 == 0 else a + b + 1)


def test_a_script_that_prints_its_answer_is_graded_by_the_env(tmp_path):
    script = tmp_path / "plain_agent.py"
    script.write_text(PLAIN_SCRIPT)
    output = tmp_path / "run"
    argv = ["--env", "rllm/Arithmetic-v0", "--num-tasks", "6", "--model", "canned"]
    argv += ["--output", str(output), "--no-progress"]
    argv += ["--agent-cmd", f"{sys.executable} {script}"]
    with FaultServer(completion=adds_wrongly_when_odd) as server:
        assert main([*argv, "--base-url", server.base_url]) == 0
    episodes = [
        Episode.from_json(line) for line in (output / "episodes.jsonl").read_text().splitlines()
    ]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["program_failures"] == {} and summary["errors"] == 0
    assert len(episodes) == 6
    for episode in episodes:
        assert episode.termination_reason == TerminationReason.ENV_DONE, episode.error
        a, b = episode.task["a"], episode.task["b"]
        correct = (a + b) % 2 == 0
        assert episode.info["answer"] == str(a + b if correct else a + b + 1)
        # Graded by Arithmetic-v0: 1 or 0, never the printed number taken as a reward.
        assert episode.is_correct is correct and episode.reward == float(correct)
    assert 0 < summary["mean_reward"] < 1
