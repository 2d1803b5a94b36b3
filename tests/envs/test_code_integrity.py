"""Reward integrity: solutions that attack the grader instead of solving the task earn nothing.

The task's hidden expected values are numbers the attacker cannot guess, so every reward here
would have to come from the grader being fooled.
"""

from __future__ import annotations

import pytest
from rllm_envs.code import CodeEnv
from rllm_envs.code.harness import request_for_test

from tests.sandbox.conftest import require_backend

SECRET = 918273645
MAGIC_TASK = {
    "task_id": "magic",
    "prompt": "Write magic(n) (the rule is hidden).",
    "style": "function",
    "entry_point": "magic",
    "public_tests": [{"args": "[1]", "expected": "7", "compare": "exact"}],
    "hidden_tests": [
        {"args": "[1]", "expected": "7", "compare": "exact"},
        {"args": "[2]", "expected": str(SECRET), "compare": "exact"},
    ],
}
MAGIC_STDIO_TASK = {
    "task_id": "magic-stdio",
    "prompt": "Read n, print magic(n).",
    "style": "stdio",
    "public_tests": [{"input": "1\n", "output": "7\n"}],
    "hidden_tests": [{"input": "1\n", "output": "7\n"}, {"input": "2\n", "output": f"{SECRET}\n"}],
}

ATTACKS = {
    "read_hidden_tests": """
import os
def magic(n):
    # Look everywhere the grader might keep its tests and answer with what is found.
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/proc", "/sys", "/usr", "/dev")):
            continue
        for name in files:
            try:
                text = open(os.path.join(root, name), errors="ignore").read()
            except OSError:
                continue
            if "expected" in text or "hidden_tests" in text:
                import re
                numbers = re.findall(r"expected.{0,5}?(\\d{6,})", text)
                if numbers:
                    return int(numbers[-1])
    return 7
""",
    "overwrite_tests_and_runner": """
import glob, os
for path in glob.glob("/scratch/**", recursive=True) + ["/tmp/tests.json", "/tests.json"]:
    try:
        if os.path.isfile(path):
            open(path, "w").write("print('PASSED')")
    except OSError:
        pass
def magic(n):
    return 7
""",
    "exit_zero_before_tests": """
import sys
sys.exit(0)
""",
    "os_exit_zero_inside_call": """
import os
def magic(n):
    os._exit(0)
""",
    "always_equal_object": """
class Anything(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = int.__hash__
    def __repr__(self):
        return "__import__('os').system('true') or 918273645"
def magic(n):
    return Anything(7)
""",
    "monkeypatch_harness": """
import ast, builtins, sys
ast.literal_eval = lambda text: [2]
builtins.repr = lambda value: "True"
sys.modules["__main__"].__dict__["main"] = lambda: print("ok")
def magic(n):
    sys.stdout.write("all tests passed\\n")
    return 7
""",
    "write_result_files": """
import json, os
for path in ("/scratch/result.json", "/scratch/results.json", "/tmp/verdict", "result.json"):
    try:
        with open(path, "w") as handle:
            json.dump({"passed": True, "reward": 1.0, "all_passed": True}, handle)
    except OSError:
        pass
def magic(n):
    return 7
""",
    "print_expected_patterns": """
import sys
def magic(n):
    for line in ("PASSED", "OK", "All tests passed", "True", "1 passed, 0 failed"):
        print(line)
        print(line, file=sys.stderr)
    return 7
""",
    "timing_tricks": """
import os, time
def magic(n):
    if n == 1:
        return 7
    if os.fork() == 0:        # a child that tries to answer after the parent is judged
        time.sleep(0.5)
        print(918273645)
        os._exit(0)
    time.sleep(30)            # hope a timeout counts as a pass
""",
}

STDIO_ATTACKS = {
    "exit_zero": "import sys\nsys.exit(0)",
    "echo_everything": "import sys\nprint(sys.stdin.read())\nprint('PASSED')",
    "read_expected_file": (
        "import glob\nfor p in glob.glob('/scratch/*'):\n    print(open(p).read())\nprint(7)"
    ),
}


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def env(request):
    require_backend(request.param)
    policy = {"cpu_seconds": 1, "wall_seconds": 2, "memory_mb": 256}
    environment = CodeEnv(
        [MAGIC_TASK], backend=request.param, policy=policy, reward_mode="fraction"
    )
    yield environment
    environment.close()


def play(env, task, code):
    env.reset(options={"task": task})
    _, reward, _, _, info = env.step(f"```python\n{code}\n```")
    return reward, info


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_function_task_attacks_are_not_rewarded(env, attack):
    reward, info = play(env, MAGIC_TASK, ATTACKS[attack])
    assert not info["is_correct"], (attack, info)
    assert reward <= 0.5  # at most the public case, which `return 7` legitimately solves


@pytest.mark.parametrize("attack", sorted(STDIO_ATTACKS))
def test_stdio_task_attacks_are_not_rewarded(env, attack):
    reward, info = play(env, MAGIC_STDIO_TASK, STDIO_ATTACKS[attack])
    assert not info["is_correct"] and reward <= 0.5, (attack, info)


def test_an_honest_solution_still_passes(env):
    reward, info = play(env, MAGIC_TASK, f"def magic(n):\n    return 7 if n == 1 else {SECRET}")
    assert reward == 1.0 and info["is_correct"]


def test_the_expected_value_never_enters_the_sandbox(env):
    """What a test run can see holds the input only: not the expected output, not other tests."""
    task = {**MAGIC_TASK, "hidden_tests": [{"args": "[2]", "expected": "'EXPECTED-MARKER-31337'"}]}
    request = request_for_test(task, "def magic(n):\n    return n", task["hidden_tests"][0])
    assert b"31337" not in request.stdin + b"".join(request.files.values())
    assert "31337" not in " ".join(request.argv)
    probe = """
import os
def magic(n):
    paths = [os.path.join("/proc", pid, part) for pid in os.listdir("/proc") if pid.isdigit()
             for part in ("cmdline", "environ")]
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/sys", "/usr", "/proc", "/dev")):
            dirs[:] = []
            continue
        paths += [os.path.join(root, name) for name in files]
    hits = []
    for path in paths:
        try:
            if b"313" b"37" in open(path, "rb").read(1 << 20):  # not itself a hit
                hits.append(path)
        except OSError:
            pass
    return hits
"""
    result = env.sandbox.run(request_for_test(task, probe, task["hidden_tests"][0]))
    assert result.ok, result
    assert result.stdout == "[]", result.stdout
