"""Bad agent-program input to ``rllm-eval`` and ``rllm-train``: one line on stderr naming what
is wrong, status 2, before any model loads or any program runs."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest
from rllm_agents.cli.eval import main as eval_main
from rllm_train.cli import main as train_main

from tests.cli_errors import assert_one_line_error, run_command

MATH = ["--env", "rllm/Math-v0", "--model", "tiny"]
AGENT = "examples/gateway/math_agent.py:run"


def assert_fails(capsys, main, prog: str, argv: list[str], *expected: str) -> None:
    code = main(argv)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line_error(code, captured.err, prog, *expected)


def test_the_installed_command_names_a_missing_program(tmp_path):
    result = run_command("rllm-eval", *MATH, "--agent-program", "no_such_agent_xyz:run",
                         "--output", str(tmp_path / "run"))  # fmt: skip
    assert_one_line_error(
        result.returncode, result.stderr, "rllm-eval", "--agent-program", "no_such_agent_xyz"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--agent-program", "math_agent"], ("--agent-program", "not of the form module:name")),
        (["--agent-program", "missing/agent.py:run"], ("no such file",)),
        (["--agent-program", "json:no_such"], ("has no 'no_such'",)),
        (["--agent-cmd", "no-such-program-xyz"], ("--agent-cmd", "not on PATH")),
        (["--agent-cmd", "python 'unclosed"], ("--agent-cmd", "cannot split")),
        (["--agent-cmd", sys.executable, "--agent-program", AGENT], ("not allowed with",)),
        (["--agent", "m:A", "--agent-program", AGENT], ("not allowed with",)),
        (["--agent-program", AGENT, "--max-response-tokens", "9"], ("--max-tokens",)),
        # Serving processes copy the engine: a model loaded here cannot be.
        (["--agent-program", AGENT, "--gateway-processes", "2"], ("--base-url", "copied")),
        (["--gateway-processes", "2"], ("--agent-program",)),
    ],
)
def test_rllm_eval_refuses_bad_programs(capsys, argv, expected):
    assert_fails(capsys, eval_main, "rllm-eval", [*MATH, *argv], *expected)


class SeedsOnlyTextEnv(gym.Env):
    """Text in, text out, and no task rows: each reset draws from its seed."""

    observation_space = gym.spaces.Text(max_length=64)
    action_space = gym.spaces.Text(max_length=64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Say anything.", {}

    def step(self, action):
        return "Done.", 0.0, True, False, {}


SEEDS_ONLY_ID = "rllm_test/SeedsOnlyText-v0"
if SEEDS_ONLY_ID not in gym.registry:
    gym.register(SEEDS_ONLY_ID, entry_point=SeedsOnlyTextEnv)


def test_rllm_eval_needs_task_rows_for_a_program(capsys):
    # A text env with no task set: it draws from seeds.
    argv = ["--env", f"{__name__}:{SEEDS_ONLY_ID}", "--model", "tiny", "--num-tasks", "1"]
    assert_fails(
        capsys, eval_main, "rllm-eval", [*argv, "--agent-program", AGENT], "draws its tasks"
    )


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--agent-program", "json:no_such"], ("program.function", "has no 'no_such'")),
        (
            ["--agent-program", "json:no_such", "--backend", "verl"],
            ("program.function", "has no 'no_such'"),
        ),  # fmt: skip
        (["--agent-cmd", "no-such-program-xyz --x: y"], ("program.command", "not on PATH")),
        (
            ["--agent-program", AGENT, "--executor", "ray", "rollout.dispatch=async"],
            ("rollout.executor", "inline"),
        ),  # fmt: skip
        (
            ["--agent-program", AGENT, "--backend", "verl", "verl.mode=fully_async"],
            ("verl.mode sync or one_step_off",),
        ),  # fmt: skip
        (["--agent-program", AGENT, "program.command=ls"], ("not both",)),
        (["--agent-program", AGENT, "program.timeout=-1"], ("program.timeout", "0 or more")),
        (["--agent-program", AGENT, "--env", "kuhn_poker_v0"], ("multi-agent env",)),
        (["--agent-program", AGENT, "env.kwargs.tasks=shipped:gsm8k_test"], ("data.train",)),
    ],
)
def test_rllm_train_refuses_bad_programs(capsys, tmp_path, argv, expected):
    argv = ["--env", "rllm/Math-v0", "--model", "tiny", "--output", str(tmp_path / "run"), *argv]
    assert_fails(capsys, train_main, "rllm-train", argv, *expected)
    assert not (tmp_path / "run").exists()
