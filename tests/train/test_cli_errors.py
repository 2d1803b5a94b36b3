"""``rllm-train`` turns bad input into one line on stderr naming the key or what is valid, and
status 2, before any model is loaded.

A few cases run the installed command as a user would; the rest call ``main`` in-process.
"""

from __future__ import annotations

import pytest
from rllm_train.cli import main
from rllm_train.native.backend import ray_head

from tests.cli_errors import assert_one_line_error, run_command

PROG = "rllm-train"


def assert_main_fails(capsys, argv: list[str], *expected: str) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert captured.out == ""
    return assert_one_line_error(code, captured.err, PROG, *expected)


# ---- the installed command --------------------------------------------------------------------


def test_unknown_model_names_the_embedded_ones(tmp_path):
    result = run_command(PROG, "--model", "no-such-model", "--output", str(tmp_path / "run"))
    assert_one_line_error(
        result.returncode, result.stderr, PROG, "model.name", "'no-such-model'", "smollm2, tiny"
    )
    assert not (tmp_path / "run").exists()


def test_unknown_env_id_names_the_rllm_ids(tmp_path):
    result = run_command(PROG, "--env", "rllm/FrozenLak-v0", "--output", str(tmp_path / "run"))
    assert_one_line_error(
        result.returncode, result.stderr, PROG, "env.id", "rllm/FrozenLake-v0", "rllm ids:"
    )


def test_an_env_module_in_the_current_folder_is_found_and_a_bare_id_gets_the_hint(tmp_path):
    """As with ``python -m``: the folder the command runs in is importable."""
    project = tmp_path / "my_project"
    project.mkdir()
    (project / "__init__.py").write_text("")
    (project / "envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('my/Puzzle-v0', entry_point='rllm_envs.arithmetic:ArithmeticEnv')\n"
    )
    found = run_command(
        PROG, "--dry-run", "--env", "my_project.envs:my/Puzzle-v0", cwd=str(tmp_path)
    )
    assert found.returncode == 0, found.stderr[-2000:]
    bare = run_command(PROG, "--dry-run", "--env", "my/Puzzle-v0", cwd=str(tmp_path))
    assert_one_line_error(
        bare.returncode, bare.stderr, PROG, "'my/Puzzle-v0'", "--env your_module:my/Puzzle-v0"
    )


def test_unreachable_ray_cluster_fails_before_the_model_is_loaded(tmp_path):
    # Port 9 (discard) has no listener on the loopback; ray.init would wait on it for ever.
    result = run_command(PROG, "--executor", "ray", "--ray-address", "127.0.0.1:9",
                         "--output", str(tmp_path / "run"), "rollout.dispatch=async")  # fmt: skip
    assert_one_line_error(
        result.returncode, result.stderr, PROG, "cannot reach", "127.0.0.1:9", "--ray-address"
    )
    assert not (tmp_path / "run").exists()


def test_ray_addresses_name_the_head_ray_init_would_join():
    assert ray_head("10.0.0.5:6380") == ("10.0.0.5", 6380)
    assert ray_head("head") == ("head", 6379)  # the GCS port
    assert ray_head("ray://head") == ("head", 10001)  # the Ray Client server's
    assert ray_head("[::1]:7000") == ("::1", 7000)
    assert [ray_head(address) for address in ("", "local", "auto")] == [None] * 3


def test_bad_number_flag():
    result = run_command(PROG, "--steps", "ten")
    assert_one_line_error(result.returncode, result.stderr, PROG, "--steps", "'ten'", "at least 1")


# ---- in-process -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--steps", "0"], ("--steps", "at least 1")),
        (["--algorithm", "dpo"], ("--algorithm", "grpo")),
        (["--backend", "jax"], ("--backend", "native")),
        (["trainer.lrr=1e-5"], ("trainer.lrr", "lr")),
        (["rollout.n=two"], ("rollout.n", "a number")),
        (["trainer.lr=-1"], ("trainer.lr", "0 or more")),  # 0: the method's own rate
        (["trainer.lr=[1"], ("trainer.lr=[1", "not valid YAML")),
        (["env.kwargs.max_operand='[1'"], ("env.kwargs.max_operand", "not valid YAML")),
        (["--env", "no_such_pkg_xyz:a/B-v0"], ("env.id", "no_such_pkg_xyz")),
        (
            ["--executor", "ray", "--ray-address", "http://head:8265", "rollout.dispatch=async"],
            ("rollout.ray_address", "ray://HOST:PORT"),
        ),
        (
            ["--executor", "ray", "--ray-address", "head:port", "rollout.dispatch=async"],
            ("rollout.ray_address", "'head:port'"),
        ),
    ],
)
def test_bad_flags_and_keys_are_named(capsys, argv, expected):
    assert_main_fails(capsys, ["--dry-run", *argv], *expected)


def test_env_kwargs_the_env_refuses(capsys):
    lake = ["--dry-run", "--env", "rllm/FrozenLake-v0"]
    assert_main_fails(capsys, [*lake, "env.kwargs.colour=blue"], "env.kwargs", "colour")
    assert_main_fails(
        capsys,
        ["--dry-run", "--env", "rllm/Math-v0", "env.kwargs.tasks=shipped:train"],
        "env.kwargs",
        "'train'",
        "gsm8k_train",
    )


def test_a_non_text_env_is_refused_naming_the_text_adapter(capsys):
    assert_main_fails(
        capsys,
        ["--dry-run", "--env", "FrozenLake-v1"],
        "env.id",
        "Discrete actions, not text",
        "env.id=rllm/GymText-v0 env.kwargs.env_id=FrozenLake-v1",
    )


def test_bad_yaml_file(capsys, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("trainer:\n  lr: [1e-5\n")
    assert_main_fails(capsys, ["--config", str(path), "--dry-run"], str(path), "not valid YAML")
    assert_main_fails(capsys, ["--config", str(tmp_path / "none.yaml")], "not found")
