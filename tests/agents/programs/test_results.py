"""What a program hands back: a callable's numbers, answers and result objects, a command's last
line (a result object, else its answer), and the clear failures of the rest."""

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
        ("\\boxed{8}", ProgramResult(answer="\\boxed{8}")),  # a returned string: the answer
    ],
)
def test_valid_results(value, expected):
    assert parse_result(value) == expected


@pytest.mark.parametrize(
    "value, words",
    [
        (None, "NoneType"),
        (True, "bool"),
        (["8"], "list"),
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
    assert parse_output('{"reward": 0.5}') == ProgramResult(reward=0.5)


@pytest.mark.parametrize(
    "stdout, answer",
    [
        ("thinking...\n42\n", "42"),  # print(answer)
        ("0.5", "0.5"),  # a bare JSON number is an answer, not a reward
        ('"42"', "42"),  # a bare JSON string: its text
        ("The answer is \\boxed{42}.  \n", "The answer is \\boxed{42}."),
        ("{1, 2}", "{1, 2}"),  # not a JSON object: an answer like any other line
        ("[1, 2]", "[1, 2]"),
        ("null", "null"),
    ],
)
def test_a_last_line_that_is_not_a_json_object_is_the_answer(stdout, answer):
    assert parse_output(stdout) == ProgramResult(answer=answer)


@pytest.mark.parametrize(
    "stdout, words",
    [("", "printed nothing"), ("\n  \n", "printed nothing"), ('{"rewrad": 1}', "rewrad")],
)
def test_unusable_stdout(stdout, words):
    with pytest.raises(ProgramFailure, match=words) as caught:
        parse_output(stdout)
    assert caught.value.kind == "bad_output"


def test_a_graded_run_without_token_ids_keeps_its_reward():
    """Calls a served model answered without token ids (no tokenizer) form no sequence; the
    env's grade is still the episode's reward."""
    from rllm_agents.gateway.sessions import RecordedCall
    from rllm_agents.programs.grading import Grade
    from rllm_agents.programs.spec import ProgramOutput
    from rllm_agents.programs.workflow import program_episode

    episode = program_episode(
        uid="add-2-3:0",
        job={"id": "add-2-3", "task": {"a": 2, "b": 3}},
        calls=[
            RecordedCall(0, [], None, [], [], [], "5", [], "stop", {}, started=0.0, latency_s=0.1)
        ],
        trajectories=[],
        report={"skipped_calls": 1},
        output=ProgramOutput(ProgramResult(answer="5"), seconds=0.1),
        failure=None,
        grade=Grade(reward=1.0, is_correct=True, failure=None, seconds=0.0),
    )
    assert episode.reward == 1.0 and episode.is_correct is True
    assert episode.trajectories[0].info == {"untokenized_calls": 1}
