"""The config and the CLI: YAML + overrides, and bad input named before anything slow starts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from rllm_train.cli import main
from rllm_train.config import ConfigError, build_config


def test_yaml_then_overrides_win(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("trainer:\n  lr: 0.001\n  steps: 7\nenv:\n  kwargs: {max_operand: 5}\n")
    config = build_config(path, ["trainer.lr=1e-5", "env.kwargs.seed_offset=3", "rollout.n=4"])
    assert config.trainer.lr == pytest.approx(1e-5)
    assert config.trainer.steps == 7
    assert config.env.kwargs == {"max_operand": 5, "seed_offset": 3}
    assert config.rollout.n == 4


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("trainer.lrr=1", "trainer.lrr"),
        ("training.lr=1", "training.lr"),
        ("trainer.steps=many", "trainer.steps"),
        ("trainer.steps=2.5", "trainer.steps"),
        ("algorithm.name=dpo", "algorithm.name"),
        ("rollout.n=1", "rollout.n"),
        ("trainer.lr=-1", "trainer.lr"),
        ("trainer.resume=perhaps", "trainer.resume"),
        ("notakeyvalue", "notakeyvalue"),
    ],
)
def test_bad_keys_and_values_are_named(override, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        build_config(overrides=[override])


def test_bad_yaml_section_is_named(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  stepz: 3\n")
    with pytest.raises(ConfigError, match=r"trainer\.stepz"):
        build_config(path)


def test_cli_rejects_bad_config_quickly(capsys):
    started = time.perf_counter()
    assert main(["--steps", "3", "rollout.tempreature=0.5"]) == 2
    assert main(["--env", "nobody/Nothing-v0"]) == 2
    assert main(["--env", "no_such_module_xyz:a/B-v0"]) == 2
    errors = capsys.readouterr().err
    assert "rollout.tempreature" in errors
    assert "'nobody/Nothing-v0' is not a registered" in errors
    assert "no_such_module_xyz" in errors
    assert time.perf_counter() - started < 5  # no model was loaded


def test_cli_flags_map_to_config(capsys):
    assert (
        main(
            [
                "--dry-run",
                "--env",
                "rllm/FrozenLake-v0",
                "--model",
                "tiny",
                "--algorithm",
                "rloo",
                "--steps",
                "3",
                "--output",
                "somewhere",
                "--resume",
                "rollout.max_turns=4",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    for expected in (
        "id: rllm/FrozenLake-v0",
        "name: tiny",
        "name: rloo",
        "steps: 3",
        "output: somewhere",
        "resume: true",
        "max_turns: 4",
    ):
        assert expected in printed


def test_help_documents_every_flag_and_section():
    result = subprocess.run(
        [sys.executable, "-m", "rllm_train.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    for flag in (
        "--env",
        "--model",
        "--algorithm",
        "--backend",
        "--steps",
        "--output",
        "--resume",
        "grpo",
        "reinforce_plus_plus",
        "ppo",
        "section.key=value",
    ):
        assert flag in result.stdout
    for section in ("model:", "env:", "rollout:", "algorithm:", "trainer:"):
        assert section in result.stdout


def test_a_bare_off_stays_the_word_off_in_a_text_setting():
    # YAML reads `off` as false; verl.rollout_is=off must still turn rollout correction off.
    config = build_config(overrides=["verl.rollout_is=off"])
    assert config.verl.rollout_is == "off"
    assert build_config(overrides=["verl.rollout_is=sequence"]).verl.rollout_is == "sequence"
