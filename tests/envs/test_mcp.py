"""rllm/MCP-v0 against real MCP servers: the shipped retrieval server and the toy test server
(over stdio and Streamable HTTP), Python-function tools, and server crash/hang recovery."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import gymnasium as gym
import pytest

from tests.parts import require_module

require_module("mcp", "rllm/MCP-v0 needs the mcp extra")

from rllm_envs.mcp import MCPEnv  # noqa: E402
from rllm_envs.mcp.actions import ToolCall, parse_action  # noqa: E402
from rllm_envs.mcp.retrieval.server import SHIPPED_CORPUS, Corpus  # noqa: E402
from rllm_envs.mcp.rewards import exact_match, resolve_grader, token_f1  # noqa: E402
from rllm_envs.mcp.servers import parse_servers  # noqa: E402

from tests.mcp.helpers import (  # noqa: E402
    REPO_ROOT,
    TOY_SERVER,
    child_pids,
    http_toy_server,
    wait_until,
)

TASKS = [{"task_id": "sum", "question": "What is 2 + 3?", "answer": "5"}]


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def module_toy_env():
    # One server start for the module's many short tests (starting one takes seconds).
    env = MCPEnv({"toy": TOY_SERVER}, TASKS, call_timeout=5)
    yield env
    env.close()


@pytest.fixture
def toy_env(module_toy_env):
    module_toy_env.reset(seed=0)
    return module_toy_env


# -- the action grammar and graders (pure) ------------------------------------------------
def test_parse_action_reads_tagged_openai_and_answer_forms():
    tagged = parse_action(
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n<tool_call>{"name": "b"}'
    )
    assert tagged.tool_calls == (ToolCall("a", {"x": 1}), ToolCall("b", {}))
    openai = parse_action(
        json.dumps(
            {
                "tool_calls": [
                    {"type": "function", "function": {"name": "s", "arguments": '{"q": "x"}'}}
                ]
            }
        )
    )
    assert openai.tool_calls == (ToolCall("s", {"q": "x"}),)
    assert parse_action('[{"name": "s", "arguments": {}}]').tool_calls == (ToolCall("s", {}),)
    assert parse_action("hmm</think>It is <answer> Paris </answer>").answer == "Paris"
    assert parse_action("just text").answer == "just text"
    assert "not valid JSON" in parse_action("<tool_call>{oops}</tool_call>").error
    assert "arguments" in parse_action('<tool_call>{"name": "a", "arguments": 3}</tool_call>').error


def test_graders_normalise_and_take_the_best_gold_answer():
    task = {"answer": ["The Eiffel Tower", "Tour Eiffel"]}
    assert exact_match("eiffel tower.", task) == 1.0
    assert exact_match("tower", task) == 0.0
    assert token_f1("the tower", task) == pytest.approx(2 / 3)
    assert resolve_grader("rllm_envs.mcp.rewards:token_f1") is token_f1
    with pytest.raises(ValueError, match="unknown reward"):
        resolve_grader("nonsense")


def test_server_specs_from_config_forms():
    specs = parse_servers({"mcpServers": {"t": {"command": "python", "args": ["-m", "x"]}}})
    assert specs[0].transport == "stdio" and specs[0].args == ("-m", "x")
    assert parse_servers("http://127.0.0.1:9/mcp")[0].transport == "http"
    with pytest.raises(ValueError, match="unknown field"):
        parse_servers({"t": {"comand": "x"}})


def test_bm25_finds_the_first_hop_document_of_every_shipped_question():
    corpus = Corpus.load(SHIPPED_CORPUS)
    for split in ("train", "test"):
        path = SHIPPED_CORPUS.parent / f"{split}.jsonl"
        for line in path.read_text().splitlines():
            row = json.loads(line)
            assert f"[{row['supporting_docs'][0]}]" in corpus.search(row["question"], 5), row


# -- the shipped retrieval task -----------------------------------------------------------
def test_shipped_multi_hop_question_is_solved_by_following_the_documents():
    env = gym.make("rllm/MCP-v0")
    try:
        observation, info = env.reset(seed=3)
        assert {tool["function"]["name"] for tool in info["tools"]} == {"search", "open_document"}
        assert "open_document" in observation and "Question:" in observation
        row = env.unwrapped.task
        # Follow the supporting documents the way a good agent would, then answer.
        opened = [env.step(call("open_document", doc_id=doc))[0] for doc in row["supporting_docs"]]
        assert all(row["supporting_docs"][i] in text for i, text in enumerate(opened))
        assert row["answer"] in opened[-1]
        _, reward, terminated, truncated, info = env.step(f"<answer>{row['answer']}</answer>")
        assert (reward, terminated, truncated, info["is_correct"]) == (1.0, True, False, True)
    finally:
        env.close()


# -- behaviour against the toy server -----------------------------------------------------
def test_tool_results_errors_and_parallel_calls(toy_env):
    observation, reward, terminated, truncated, info = toy_env.step(
        call("add", a=2, b=3) + call("echo", text="hi") + call("fail", message="boom")
    )
    assert observation.count("<tool_response") == 3
    assert '<tool_response name="add">\n5\n</tool_response>' in observation
    assert '<tool_response name="echo">\nhi\n' in observation
    assert '<tool_response name="fail" status="error">' in observation
    assert info["action_valid"] is True and info["tool_errors"] == 1
    assert info["tool_calls"] == ["add", "echo", "fail"]
    assert (reward, terminated, truncated) == (0.0, False, False)
    _, reward, terminated, _, info = toy_env.step("<answer>5</answer>")
    assert reward == 1.0 and terminated and info["is_correct"]


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (call("nope"), "Unknown tool 'nope'. Available tools: add, crash, echo, fail, pid, sleep"),
        (call("add", a="two", b=3), "a: 'two' is not of type 'integer'"),
        (call("add", a=1), "'b' is a required property"),
        ('<tool_call>{"name": "add", "arguments": {"a": 1,</tool_call>', "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name"'),
    ],
)
def test_bad_calls_give_clear_observations_not_crashes(toy_env, action, expected):
    observation, reward, terminated, truncated, info = toy_env.step(action)
    assert expected in observation
    assert info["action_valid"] is False
    assert not terminated and not truncated


def test_a_bad_call_does_not_stop_the_good_ones_in_the_same_reply(toy_env):
    observation, *_, info = toy_env.step(call("add", a=1, b=1) + call("nope"))
    assert '<tool_response name="add">\n2\n' in observation and "Unknown tool" in observation
    assert info["action_valid"] is False and info["tool_errors"] == 1


def test_servers_are_shared_reused_across_episodes_and_stopped_on_close():
    before = child_pids()
    # Its own spec (an extra variable), so no other test's env holds this server.
    spec = {**TOY_SERVER, "env": {"TOY_PURPOSE": "sharing"}}
    first = MCPEnv({"toy": spec}, TASKS)
    second = MCPEnv({"toy": spec}, TASKS)
    try:
        pids = set()
        for env in (first, second, first):
            env.reset(seed=0)
            pids.add(env.step(call("pid"))[0].split("\n")[1])
        assert len(pids) == 1  # one server process for both envs, across episodes
        server_pid = int(pids.pop())
        assert server_pid in child_pids() - before
        first.close()
        first.close()  # idempotent
        assert os.path.exists(f"/proc/{server_pid}")  # still used by `second`
    finally:
        second.close()
    assert wait_until(lambda: child_pids() <= before)


@pytest.mark.slow
def test_a_server_killed_between_calls_is_restarted_transparently(toy_env):
    server_pid = int(toy_env.step(call("pid"))[0].split("\n")[1])
    os.kill(server_pid, signal.SIGKILL)
    observation, *_, info = toy_env.step(call("pid"))
    assert "failure" not in info
    assert int(observation.split("\n")[1]) != server_pid


@pytest.mark.slow
def test_a_server_that_keeps_crashing_ends_the_episode_as_a_tool_server_failure(toy_env):
    observation, reward, terminated, truncated, info = toy_env.step(call("crash"))
    assert info["failure"] == "tool_server" and truncated and not terminated
    assert "not your fault" in observation and "Connection closed" in observation
    # The next episode gets a working server again.
    toy_env.reset(seed=1)
    assert toy_env.step(call("add", a=1, b=2))[0].split("\n")[1] == "3"


@pytest.mark.slow
def test_a_hung_server_is_restarted_then_the_episode_fails_without_hanging():
    env = MCPEnv({"toy": TOY_SERVER}, TASKS, call_timeout=1.0)
    try:
        env.reset(seed=0)
        started = time.monotonic()
        _, _, _, truncated, info = env.step(call("sleep", seconds=60))
        assert info["failure"] == "tool_server" and truncated
        assert time.monotonic() - started < 20
        env.reset(seed=0)
        assert env.step(call("echo", text="alive"))[0].split("\n")[1] == "alive"
    finally:
        env.close()


def test_step_time_limit_truncates_the_episode():
    env = MCPEnv({"toy": TOY_SERVER}, TASKS, call_timeout=10, step_timeout=0.5)
    try:
        env.reset(seed=0)
        _, _, terminated, truncated, info = env.step(call("sleep", seconds=2))
        assert truncated and not terminated and info["step_timeout"] is True
    finally:
        env.close()


def test_a_server_that_cannot_start_is_a_clear_error():
    with pytest.raises(RuntimeError, match="did not start"):
        MCPEnv(
            {"broken": {"command": "python", "args": ["-c", "import sys; sys.exit(2)"]}},
            TASKS,
            connect_timeout=10,
        )


# -- Python functions as tools, custom rewards, HTTP -------------------------------------
def multiply(x: float, y: float) -> float:
    """Multiply two numbers."""
    return x * y


def half_credit(answer: str, task: dict) -> float:
    return 0.5 if answer.strip() == task["answer"] else 0.0


def test_python_functions_are_served_as_mcp_tools():
    env = MCPEnv(
        tools=[multiply, "tests.mcp.toy_server:add"],
        tasks=TASKS,
        reward="tests.envs.test_mcp:half_credit",
    )
    try:
        _, info = env.reset(seed=0)
        schemas = {tool["function"]["name"]: tool["function"] for tool in info["tools"]}
        assert schemas["multiply"]["description"] == "Multiply two numbers."
        assert schemas["multiply"]["parameters"]["properties"]["x"]["type"] == "number"
        observation, *_ = env.step(call("multiply", x=6, y=7) + call("add", a=2, b=3))
        assert "42.0" in observation and "\n5\n" in observation
        _, reward, terminated, _, info = env.step("5")
        assert reward == 0.5 and terminated and info["is_correct"] is False
    finally:
        env.close()


@pytest.mark.slow
def test_streamable_http_server():
    with http_toy_server() as url:
        env = MCPEnv({"remote": url}, TASKS)
        try:
            _, info = env.reset(seed=0)
            assert "add" in {tool["function"]["name"] for tool in info["tools"]}
            observation, *_ = env.step(call("add", a=20, b=22))
            assert observation.split("\n")[1] == "42"
        finally:
            env.close()


def test_tool_names_shared_by_two_servers_get_server_prefixes():
    env = MCPEnv({"one": TOY_SERVER, "two": {"functions": ["tests.mcp.toy_server:echo"]}}, TASKS)
    try:
        _, info = env.reset(seed=0)
        names = {tool["function"]["name"] for tool in info["tools"]}
        assert {"one__echo", "two__echo", "add"} <= names and "echo" not in names
        assert "\nhey\n" in env.step(call("two__echo", text="hey"))[0]
    finally:
        env.close()


@pytest.mark.slow
def test_process_exit_without_close_leaves_no_server_behind():
    script = (
        "from rllm_envs.mcp import MCPEnv\n"
        "from tests.mcp.helpers import TOY_SERVER, child_pids\n"
        "env = MCPEnv({'toy': TOY_SERVER}, [{'question': 'q', 'answer': 'a'}])\n"
        "env.reset(seed=0)\n"
        'print(env.step(\'<tool_call>{"name": "pid"}</tool_call>\')[0].split()[2])\n'
        "# no close(): the process just ends\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT
    )
    assert result.returncode == 0, result.stderr
    server_pid = int(result.stdout.strip())
    assert wait_until(lambda: not os.path.exists(f"/proc/{server_pid}"), 10)
