"""What a program hands back: numbers and result objects, and the clear failures of the rest."""

from __future__ import annotations

import pytest
from rllm_agents.programs import ProgramFailure, ProgramResult, parse_output, parse_result
from rllm_agents.types import TerminationReason


@pytest.mark.parametrize(
    "value, expected",
    [
        (1, ProgramResult(reward=1.0)),
        (0.25, ProgramResult(reward=0.25)),
        ({"reward": 0}, ProgramResult(reward=0.0)),
        ({"answer": "\\boxed{8}"}, ProgramResult(answer="\\boxed{8}")),
        ({"answer": 8, "info": {"tries": 2}}, ProgramResult(answer="8", info={"tries": 2})),
        ({"reward": 1, "answer": "8"}, ProgramResult(reward=1.0, answer="8")),
    ],
)
def test_valid_results(value, expected):
    assert parse_result(value) == expected


@pytest.mark.parametrize(
    "value, words",
    [
        (None, "NoneType"),
        (True, "bool"),
        ("8", "str"),
        ({}, "neither a reward nor an answer"),
        ({"rewrad": 1}, "unknown result keys ['rewrad']"),
        ({"reward": "1"}, "reward must be a number"),
        ({"reward": float("nan")}, "finite"),
        ({"answer": ["8"]}, "answer must be text or a number"),
        ({"answer": "8", "info": [1]}, "info must be an object"),
    ],
)
def test_invalid_results_are_bad_output(value, words):
    with pytest.raises(ProgramFailure) as caught:
        parse_result(value)
    assert caught.value.kind == "bad_output"
    assert caught.value.ending == TerminationReason.ERROR
    assert words in str(caught.value)


def test_the_last_non_empty_stdout_line_is_the_result():
    stdout = 'thinking...\n{"answer": "not this"}\n{"answer": "42"}\n\n'
    assert parse_output(stdout) == ProgramResult(answer="42")
    assert parse_output("0.5") == ProgramResult(reward=0.5)


@pytest.mark.parametrize(
    "stdout, words",
    [("", "printed nothing"), ("done\n", "not JSON: 'done'"), ('"42"', "not str")],
)
def test_unusable_stdout(stdout, words):
    with pytest.raises(ProgramFailure, match=words) as caught:
        parse_output(stdout)
    assert caught.value.kind == "bad_output"
