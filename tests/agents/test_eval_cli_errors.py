"""``rllm-eval`` turns bad input into one line on stderr naming what is valid, and status 2.

A few cases run the installed command as a user would; the rest call ``main`` in-process. No
case loads a model or runs an episode: the checks come before anything slow.
"""

from __future__ import annotations

import json

import pytest
from rllm_agents.cli.eval import main
from rllm_agents.testing.fault_server import FaultServer

from tests.cli_errors import assert_one_line_error, run_command

PROG = "rllm-eval"
LAKE = ["--env", "rllm/FrozenLake-v0"]


def assert_main_fails(capsys, argv: list[str], *expected: str) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert captured.out == ""
    return assert_one_line_error(code, captured.err, PROG, *expected)


# ---- the installed command --------------------------------------------------------------------


def test_unknown_split_names_the_shipped_ones():
    result = run_command(PROG, "--env", "rllm/Math-v0", "--split", "train", "--model", "tiny")
    assert_one_line_error(
        result.returncode, result.stderr, PROG, "'train'", "gsm8k_test", "math_train"
    )


def test_unknown_env_id_names_similar_and_rllm_ids():
    result = run_command(PROG, "--env", "rllm/Mth-v0")
    assert_one_line_error(
        result.returncode, result.stderr, PROG, "'rllm/Mth-v0'", "rllm/Math-v0", "rllm ids:"
    )


def test_a_non_text_env_is_refused_before_the_model_loads(capsys):
    assert_main_fails(
        capsys,
        ["--env", "FrozenLake-v1", "--model", "tiny"],
        "'FrozenLake-v1' takes Discrete actions, not text",
        '--env rllm/GymText-v0 --env-kwargs \'{"env_id": "FrozenLake-v1"}\'',
    )


def test_unreachable_server_fails_at_once(tmp_path):
    # Port 9 (discard) has no listener on the loopback: the check refuses before any episode.
    result = run_command(PROG, *LAKE, "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                         "--output", str(tmp_path / "run"))  # fmt: skip
    assert_one_line_error(
        result.returncode, result.stderr, PROG, "cannot reach", "127.0.0.1:9", "--base-url"
    )
    assert not (tmp_path / "run").exists()  # nothing was started, nothing written


# ---- in-process -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argument", "value", "wanted"),
    [
        ("--n", "0", "at least 1"),
        ("--parallel", "-4", "at least 1"),
        ("--num-tasks", "many", "at least 1"),
        ("--max-turns", "1.5", "at least 1"),
        ("--max-tokens", "0", "at least 1"),
        ("--max-response-tokens", "0", "at least 1"),
        ("--temperature", "-0.1", "at least 0"),
        ("--top-p", "1.5", "(0, 1]"),
        ("--timeout", "0", "greater than 0"),
        ("--seed", "x", "invalid int"),
    ],
)
def test_bad_numbers_name_the_argument_and_what_it_takes(capsys, argument, value, wanted):
    assert_main_fails(capsys, [*LAKE, argument, value], argument, repr(value), wanted)


def test_missing_env_and_unknown_flag(capsys):
    assert_main_fails(capsys, ["--model", "tiny"], "--env", "required")
    assert_main_fails(capsys, [*LAKE, "--paralel", "4"], "--paralel", "rllm-eval --help")


def test_unknown_local_model_names_the_embedded_ones(capsys, tmp_path):
    assert_main_fails(capsys, [*LAKE, "--model", str(tmp_path / "nothing")], "smollm2, tiny")


def test_model_the_server_does_not_serve(capsys):
    with FaultServer() as server:  # serves one model, "canned"
        assert_main_fails(
            capsys,
            [*LAKE, "--base-url", server.base_url, "--model", "gpt-9"],
            "'gpt-9' is not served",
            "canned",
        )
        assert server.stats.requests == 0  # no completion was asked for


def test_bad_env_kwargs(capsys):
    assert_main_fails(capsys, [*LAKE, "--env-kwargs", "{max_turns: 3}"], "not valid JSON")
    assert_main_fails(capsys, [*LAKE, "--env-kwargs", "[1]"], "must be a JSON object")
    assert_main_fails(
        capsys,
        [*LAKE, "--env-kwargs", json.dumps({"colour": "blue"})],
        "cannot make rllm/FrozenLake-v0",
        "colour",
    )


def test_unimportable_env_module_and_server_options(capsys):
    assert_main_fails(capsys, ["--env", "no_such_pkg_xyz:a/B-v0"], "no_such_pkg_xyz")
    assert_main_fails(capsys, [*LAKE, "--base-url", "ftp://host/v1", "--model", "m"], "http://")
    assert_main_fails(
        capsys,
        [*LAKE, "--base-url", "http://127.0.0.1:9/v1", "--llamacpp"],
        "not allowed with argument",
    )
    assert_main_fails(
        capsys,
        [*LAKE, "--base-url", "http://127.0.0.1:9/v1", "--engine", "transformers"],
        "not allowed with argument",
    )
    assert_main_fails(capsys, [*LAKE, "--engine", "sglang"], "--engine", "vllm")
    assert_main_fails(
        capsys, [*LAKE, "--model", "tiny", "--slots", "2"], "--slots", "only the llama.cpp"
    )


def test_without_a_split_the_env_plays_its_test_split():
    from rllm_agents.cli.eval import build_parser, env_kwargs_from

    def tasks(*argv: str):
        return env_kwargs_from(build_parser().parse_args(list(argv))).get("tasks")

    assert tasks("--env", "rllm/Math-v0") == "shipped:gsm8k_test"
    assert tasks("--env", "rllm/FrozenLake-v0") == "shipped:test"
    assert tasks("--env", "rllm/Math-v0", "--split", "gsm8k_train") == "shipped:gsm8k_train"
    # The user's own task choice stands.
    assert tasks("--env", "rllm/Math-v0", "--env-kwargs", '{"dataset": "x"}') is None
    assert tasks("--env", "rllm/Arithmetic-v0") is None  # its rule-made default


def test_help_gives_the_defaults_and_the_multi_agent_options(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for default in ("(default: the env's own limit", "(default: 0.6)", "(default: 512)"):
        assert default in shown, default
    for option in ("--opponent", "--num-games", "--max-cycles", "tictactoe_v0"):
        assert option in shown, option


@pytest.mark.parametrize(
    "env_args, turns",
    [
        (["--env", "rllm/RunningTotal-v0"], 3),  # one turn per addend
        (["--env", "rllm/FrozenLake-v0", "--env-kwargs", '{"size": 3}'], 18),  # 2 x size^2
        (["--env", "rllm/Arithmetic-v0"], 1),
    ],
)
def test_without_max_turns_an_episode_plays_as_long_as_the_env_allows(tmp_path, env_args, turns):
    """The FrozenLake stumble: 8 turns against the 98 moves the env promised the model."""
    output = tmp_path / "run"
    argv = [*env_args, "--model", "tiny", "--num-tasks", "1", "--max-tokens", "2"]
    assert main([*argv, "--no-progress", "--output", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert summary["config"]["max_turns"] == turns
