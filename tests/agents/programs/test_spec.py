"""Naming an agent program: functions by module or file, commands by their command line; every
bad name is a ProgramSpecError that says what is wrong."""

from __future__ import annotations

import sys

import pytest
from rllm_agents.programs import (
    CommandProgram,
    FunctionProgram,
    ProgramSpecError,
    command_program,
    function_program,
    program_from_options,
)


def test_a_function_by_module_file_or_object(tmp_path):
    by_module = function_program("json:dumps")
    assert isinstance(by_module, FunctionProgram) and by_module.name == "json:dumps"
    agent = tmp_path / "agent.py"
    agent.write_text("async def run(task, base_url, api_key):\n    return 1.0\n")
    by_file = function_program(f"{agent}:run")
    assert by_file.function.__name__ == "run"
    assert function_program(f"{agent}:run").function is by_file.function  # loaded once
    assert function_program(len).function is len


@pytest.mark.parametrize(
    "spec, words",
    [
        ("json", "not of the form module:name"),
        ("no_such_module_xyz:run", "cannot import 'no_such_module_xyz'"),
        ("json:no_such_function", "has no 'no_such_function'"),
        ("json:__doc__", "is not callable"),
        ("missing/agent.py:run", "no such file"),
    ],
)
def test_bad_function_names(spec, words):
    with pytest.raises(ProgramSpecError, match=words):
        function_program(spec)


def test_a_file_that_fails_to_load_says_why(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('needs a GPU')\n")
    with pytest.raises(ProgramSpecError, match="RuntimeError: needs a GPU"):
        function_program(f"{broken}:run")


def test_a_command_is_split_like_a_shell_would():
    program = command_program(f"{sys.executable} agent.py --name 'two words'")
    assert isinstance(program, CommandProgram)
    assert program.argv == (sys.executable, "agent.py", "--name", "two words")


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        ("python 'unclosed", "cannot split"),
        ("no-such-program-xyz --flag", "not on PATH"),
        ("./no/such/file", "not an executable file"),
    ],
)
def test_bad_commands(text, words):
    with pytest.raises(ProgramSpecError, match=words):
        command_program(text)


def test_one_program_at_most():
    assert program_from_options() is None
    with pytest.raises(ProgramSpecError, match="not both"):
        program_from_options("json:dumps", sys.executable)
