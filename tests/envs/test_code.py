"""rllm/Code-v0: grading, multi-turn feedback, task formats and the shipped task sets."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.code import CodeEnv, last_code_block
from rllm_envs.code.formats import TaskFormatError, to_code_task
from rllm_envs.code.harness import run_tests
from rllm_envs.code.shipped import SHIPPED_SETS
from rllm_envs.core.tasks import read_task_file
from rllm_envs.sandbox import SandboxPolicy

from tests.sandbox.conftest import require_backend

FAST_POLICY = {"cpu_seconds": 2, "wall_seconds": 3, "memory_mb": 256}

ADD_TASK = {
    "task_id": "add-two",
    "prompt": "Write add(a, b) returning a + b.",
    "style": "function",
    "entry_point": "add",
    "public_tests": [{"args": "[1, 2]", "expected": "3", "compare": "exact"}],
    "hidden_tests": [
        {"args": "[1, 2]", "expected": "3", "compare": "exact"},
        {"args": "[40, 2]", "expected": "42", "compare": "exact"},
        {"args": "[-5, 5]", "expected": "0", "compare": "exact"},
    ],
}
ECHO_SUM_TASK = {
    "task_id": "sum-lines",
    "prompt": "Print the sum of the integers on the first input line.",
    "style": "stdio",
    "public_tests": [{"input": "1 2 3\n", "output": "6\n"}],
    "hidden_tests": [
        {"input": "1 2 3\n", "output": "6\n"},
        {"input": "10 -4\n", "output": "6\n"},
        {"input": "7\n", "output": "7\n"},
    ],
}


def reply(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def code_env(request):
    require_backend(request.param)
    env = CodeEnv(ADD_TASK and [ADD_TASK], backend=request.param, policy=FAST_POLICY)
    yield env
    env.close()


def episode(env, task, code, **options):
    env.reset(seed=0, options={"task": task, **options})
    return env.step(reply(code))


def test_correct_solution_is_rewarded_on_both_backends(code_env):
    _, reward, terminated, truncated, info = episode(
        code_env, ADD_TASK, "def add(a, b):\n    return a + b"
    )
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["is_correct"] and info["tests_passed"] == 3 == info["tests_total"]
    _, reward, *_ = episode(code_env, ECHO_SUM_TASK, "print(sum(map(int, input().split())))")
    assert reward == 1.0


SCRIPT_STYLE_SOLUTION = """
import pickle
import sys


class Point:
    def __init__(self, x):
        self.x = x


def main():
    total = sum(map(int, sys.stdin.readline().split()))
    print(pickle.loads(pickle.dumps(Point(total))).x)
    exit()
    print("never printed")


if __name__ == "__main__":
    main()
"""


def test_script_style_solutions_behave_as_if_run_directly(code_env):
    # Python runs without `site` in the sandbox; exit()/quit(), __main__ and pickling of the
    # solution's own classes must still work as in `python3 solution.py`.
    _, reward, *_ = episode(code_env, ECHO_SUM_TASK, SCRIPT_STYLE_SOLUTION)
    assert reward == 1.0
    quitting = "print(sum(map(int, input().split())))\nquit(0)\nprint('extra')"
    _, reward, *_ = episode(code_env, ECHO_SUM_TASK, quitting)
    assert reward == 1.0
    _, reward, *_ = episode(code_env, ADD_TASK, "def add(a, b):\n    exit(a + b)")
    assert reward == 0.0  # leaving from inside the call is not returning a value


def test_a_crashing_solution_is_reported_as_solution_py(code_env):
    # The runner executes the source without compile() (see runner.py); the traceback must
    # still name solution.py and its line, and nothing of the runner.
    crashing = "import sys\nvalues = sys.stdin.read().split()\nprint(int(values[0]) // 0)\n"
    test = ECHO_SUM_TASK["public_tests"][0]
    report = run_tests(code_env.sandbox, ECHO_SUM_TASK, crashing, [test])
    (outcome,) = report.outcomes
    assert outcome.status == "error"
    assert 'File "solution.py", line 3, in <module>' in outcome.error, outcome.error
    assert outcome.error.rstrip().endswith("ZeroDivisionError: integer division or modulo by zero")
    assert "runner" not in outcome.error and "<string>" not in outcome.error
    report = run_tests(code_env.sandbox, ECHO_SUM_TASK, "print(1 +)", [test])
    assert 'File "solution.py", line 1' in report.outcomes[0].error
    assert "SyntaxError" in report.outcomes[0].error


def test_solutions_see_the_standard_library_only(code_env):
    # Neither the host's (bwrap) nor the image's (docker) installed packages are on the path.
    expected = [{"input": "", "output": "stdlib only\n"}]
    task = {**ECHO_SUM_TASK, "public_tests": expected, "hidden_tests": expected}
    probe = "import sys\nextra = [p for p in sys.path if p.endswith('-packages')]\n"
    probe += "print(extra or 'stdlib only')"
    _, reward, _, _, info = episode(code_env, task, probe)
    assert reward == 1.0, info


def test_wrong_solution_gets_nothing_and_the_episode_ends(code_env):
    _, reward, terminated, _, info = episode(code_env, ADD_TASK, "def add(a, b):\n    return 3")
    assert reward == 0.0 and terminated and not info["is_correct"]
    assert info["test_status"] == {"passed": 1, "wrong_answer": 1}  # stops at the first failure


def test_info_reports_the_effective_policy(code_env):
    _, info = code_env.reset(seed=0)
    policy = info["sandbox_policy"]
    assert policy["backend"] == code_env.backend
    assert policy["cpu_seconds"] == 2 and policy["memory_mb"] == 256
    assert policy["network"] is False and policy["capabilities"] == "none"
    # bwrap has no cgroup of its own, so its memory limit is per process only (and says so).
    scope = {"bwrap": "per_process", "docker": "per_process_and_run"}[code_env.backend]
    assert policy["memory_limit"] == scope


def test_fraction_reward_counts_hidden_tests():
    env = CodeEnv([ADD_TASK], reward_mode="fraction", policy=FAST_POLICY)
    try:
        code = "def add(a, b):\n    return a + b if a > 0 else 99"
        _, reward, terminated, _, info = episode(env, ADD_TASK, code)
        assert reward == pytest.approx(2 / 3) and terminated
        assert info["tests_passed"] == 2 and info["tests_total"] == 3
    finally:
        env.close()


def test_multi_turn_shows_failing_public_tests_but_never_hidden_ones():
    env = CodeEnv([ADD_TASK], max_turns=3, policy=FAST_POLICY)
    try:
        env.reset(seed=0)
        observation, reward, terminated, truncated, _ = env.step(
            reply("def add(a, b):\n    return a - b")
        )
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert "arguments [1, 2]" in observation and "'3'" in observation
        assert "40" not in observation and "42" not in observation  # hidden tests stay hidden
        # Passes the public test but not the hidden ones: told so, still without details.
        observation, *_ = env.step(reply("def add(a, b):\n    return 3"))
        assert "passes the example tests but fails hidden tests" in observation
        assert "42" not in observation
        observation, reward, terminated, truncated, _ = env.step(
            reply("def add(a, b):\n    return a + b")
        )
        assert (reward, terminated, truncated) == (1.0, True, False)
    finally:
        env.close()


def test_last_try_of_a_multi_turn_episode_terminates():
    env = CodeEnv([ADD_TASK], max_turns=2, policy=FAST_POLICY)
    try:
        env.reset(seed=0)
        assert env.step(reply("def add(a, b):\n    return 0"))[2:4] == (False, False)
        assert env.step(reply("def add(a, b):\n    return 0"))[1:4] == (0.0, True, False)
    finally:
        env.close()


@pytest.mark.parametrize("text", ["", "def add(a, b): return a + b", "```python\n```", "\x00```"])
def test_a_reply_without_code_is_an_invalid_action(text):
    env = CodeEnv([ADD_TASK], policy=FAST_POLICY)
    try:
        env.reset(seed=0)
        observation, reward, terminated, truncated, info = env.step(text)
        assert info["action_valid"] is False and reward == 0.0
        assert terminated and not truncated
        assert "code block" in observation
    finally:
        env.close()


def test_the_last_code_block_is_the_answer():
    text = "First try:\n```python\nprint(1)\n```\nBetter:\n```py\nprint(2)\n```\nDone."
    assert last_code_block(text) == "print(2)\n"
    assert last_code_block("```\nx = 1\n```") == "x = 1\n"
    assert last_code_block("no code") is None


def test_same_seed_same_episode_and_info():
    env = CodeEnv(policy=FAST_POLICY)
    try:
        first = env.reset(seed=123)
        second = env.reset(seed=123)
        assert first == second
        step_a = env.step(reply("print('hi')"))
        env.reset(seed=123)
        step_b = env.step(reply("print('hi')"))
        assert step_a == step_b
    finally:
        env.close()


def test_gym_make_with_kwargs_and_missing_engine_message(monkeypatch):
    env = gym.make("rllm/Code-v0", tasks="shipped:mbpp_stdio", policy=FAST_POLICY)
    try:
        assert len(env.unwrapped.tasks) == 234
        assert env.unwrapped.tasks[0]["style"] == "stdio"
    finally:
        env.close()
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        CodeEnv([ADD_TASK])
    with pytest.raises(ValueError, match="unknown sandbox backend 'podman'"):
        CodeEnv([ADD_TASK], backend="podman")


# -- task formats ------------------------------------------------------------------------------
HUMANEVAL_ROW = {
    "task_id": "HumanEval/x",
    "prompt": 'from typing import List\n\ndef total(xs: List[int]) -> int:\n    """Sum."""\n',
    "entry_point": "total",
    "canonical_solution": "    return sum(xs)\n",
    "test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n"
    "    assert abs(candidate([0.5, 0.25]) - 0.75) < 1e-6\n    assert candidate([]) == 0\n"
    "    assert math.isclose(candidate([0.1, 0.2]), 0.3, rel_tol=1e-6)\n"
    "    for x in range(3):\n        assert candidate([x]) == x\n",
}
MBPP_ROW = {
    "task_id": 7,
    "text": "Write a function to find the shared elements of two tuples.",
    "code": "def shared(a, b):\n    return tuple(set(a) & set(b))",
    "test_list": [
        "assert set(shared((1, 2), (2, 3))) == set((2,))",
        "assert shared((1, 5), (5, 6)) == (5,)",
        "assert not shared((1,), (2,))",
    ],
    "test_setup_code": "import math",
}
APPS_ROW = {
    "problem_id": 11,
    "question": "Read n and print n squared.",
    "input_output": json.dumps({"inputs": ["3\n", "5\n"], "outputs": ["9\n", "25\n"]}),
}
APPS_CALL_ROW = {
    "problem_id": 12,
    "question": "Return the pair (a, b) sorted.",
    "starter_code": "def pair(a, b):",
    "input_output": json.dumps(
        {"fn_name": "pair", "inputs": [[2, 1], [1, 2]], "outputs": [[[1, 2]], [1, 2]]}
    ),
}
LIVECODEBENCH_ROW = {
    "question_id": "abc1",
    "question_content": "Given n, print 2n.",
    "public_test_cases": json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}]),
    "private_test_cases": json.dumps([{"input": "7\n", "output": "14\n", "testtype": "stdin"}]),
    "metadata": "{}",
}

FORMAT_CASES = [
    (HUMANEVAL_ROW, "    return sum(xs)", True),  # the body alone is not a whole function
    (HUMANEVAL_ROW, "def total(xs: List[int]) -> int:\n    return sum(xs)", True),
    (MBPP_ROW, MBPP_ROW["code"], True),
    (APPS_ROW, "n = int(input())\nprint(n * n)", True),
    (APPS_CALL_ROW, "def pair(a, b):\n    return tuple(sorted((a, b)))", True),
    (LIVECODEBENCH_ROW, "print(2 * int(input()))", True),
    (LIVECODEBENCH_ROW, "print(4)", False),
]


@pytest.mark.parametrize(("row", "code", "solves"), FORMAT_CASES)
def test_common_dataset_formats_are_graded(row, code, solves):
    env = CodeEnv([row], policy=FAST_POLICY)
    try:
        env.reset(seed=0)
        reward = env.step(reply(code))[1]
        expected = 1.0 if solves and not code.startswith("    ") else 0.0
        assert reward == expected
    finally:
        env.close()


def test_format_conversion_reads_the_tests_it_can_and_says_when_it_cannot():
    humaneval = to_code_task(HUMANEVAL_ROW)
    assert [test["compare"] for test in humaneval["hidden_tests"]] == [
        "exact",
        "close",
        "exact",
        "close",
    ]
    assert humaneval["preamble"] == "from typing import List"
    mbpp = to_code_task(MBPP_ROW)
    assert [test["compare"] for test in mbpp["hidden_tests"]] == ["set", "exact", "falsy"]
    assert mbpp["entry_point"] == "shared"
    with pytest.raises(TaskFormatError, match="unknown code task format"):
        to_code_task({"question": "no tests"})
    with pytest.raises(TaskFormatError, match="no test"):
        to_code_task({**MBPP_ROW, "test_list": ["assert shared(x, y) == z"]})
    with pytest.raises(ValueError, match="cannot use this task"):
        CodeEnv([ADD_TASK], policy=FAST_POLICY).reset(options={"task": {"question": "?"}})


def test_tasks_from_a_jsonl_file_with_a_column_map(tmp_path):
    path = tmp_path / "apps.jsonl"
    renamed = {
        "problem_id": 1,
        "statement": "Print n squared.",
        "input_output": APPS_ROW["input_output"],
    }
    path.write_text(json.dumps(renamed) + "\n")
    env = CodeEnv(str(path), column_map={"statement": "question"}, policy=FAST_POLICY)
    try:
        observation, info = env.reset(seed=0)
        assert observation.startswith("Print n squared.") and info["task_id"] == "apps/1"
        assert env.step(reply("n = int(input())\nprint(n * n)"))[1] == 1.0
    finally:
        env.close()


# -- shipped sets ------------------------------------------------------------------------------
def test_shipped_sets_are_a_few_hundred_well_formed_problems():
    sizes = {name: len(read_task_file(path)) for name, path in SHIPPED_SETS.items()}
    assert sizes == {"humaneval": 157, "mbpp": 422, "mbpp_stdio": 234}
    for path in SHIPPED_SETS.values():
        for row in read_task_file(path):
            task = to_code_task(row)
            assert task["hidden_tests"] and task["public_tests"]
            assert task["public_tests"][0] in task["hidden_tests"]


@pytest.mark.parametrize("name", sorted(SHIPPED_SETS))
def test_shipped_reference_solutions_pass(name):
    rows = read_task_file(SHIPPED_SETS[name])
    sample = rows[:: max(1, len(rows) // 4)][:4]  # spread over the set, kept quick
    env = CodeEnv(f"shipped:{name}", policy=FAST_POLICY)
    try:
        for row in sample:
            env.reset(options={"task": row})
            assert env.step(reply(row["reference_solution"]))[1] == 1.0, row["task_id"]
    finally:
        env.close()


def test_policy_can_be_given_as_an_object_and_bounds_each_test():
    policy = SandboxPolicy(wall_seconds=1, cpu_seconds=1)
    env = CodeEnv([ADD_TASK], policy=policy)
    try:
        _, reward, _, _, info = episode(
            env, ADD_TASK, "import time\ndef add(a, b):\n    time.sleep(5)"
        )
        assert reward == 0.0 and info["test_status"] == {"timeout": 1}
        assert info["sandbox_policy"]["wall_seconds"] == 1
    finally:
        env.close()
