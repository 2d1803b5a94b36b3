"""``rllm-train --dry-run`` on both backends, through the real command-line entry point.

The verl backend's composition itself is tested in test_verl_config.py; here the point is that
the CLI hands a ``--backend verl --dry-run`` to it (verl's composed config, not an echo of
ours), for every built-in env, and turns a bad config into exit status 2 with the key named.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import rllm_envs
import yaml
from rllm_train.cli import main
from rllm_train.verl.versions import SUPPORTED_VERL_VERSIONS, verl_status

from tests.parts import require_part

# The embedded default task (rllm/Arithmetic-v0, in ENV_IDS) under the id older configs use:
# deprecated, still made.
OLD_DEFAULT_TASK = "rllm_train.default_task:rllm_train/Arithmetic-v0"
# Settings a built-in env needs to be made at all (GymText wraps another Gymnasium env).
ENV_KWARGS: dict[str, list[str]] = {"rllm/GymText-v0": ["env.kwargs.env_id=CartPole-v1"]}


def require_verl() -> None:
    status = verl_status()
    require_part(
        status.supported,
        f"the verl backend needs verl {', '.join(SUPPORTED_VERL_VERSIONS)} "
        f"(installed: {status.version}): pip install 'rllm-train[verl]'",
    )


def test_native_dry_run_prints_our_config(capsys, tmp_path):
    code = main(["--dry-run", "--env", "rllm/FrozenLake-v0", "--output", str(tmp_path / "run")])
    assert code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["env"]["id"] == "rllm/FrozenLake-v0"
    assert printed["trainer"]["backend"] == "native"
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [*rllm_envs.ENV_IDS, OLD_DEFAULT_TASK])
def test_verl_dry_run_prints_verls_composed_config(capsys, tmp_path, tiny_model, env_id):
    require_verl()
    output = tmp_path / "run"
    argv = ["--backend", "verl", "--dry-run", "--env", env_id, "--model", tiny_model]
    code = main([*argv, "--output", str(output), *ENV_KWARGS.get(env_id, [])])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # verl's own trainer config (its section names), composed from ours ...
    assert "adv_estimator: grpo" in captured.out
    assert "actor_rollout_ref:" in captured.out
    assert f"path: {tiny_model}" in captured.out
    # ... and the data rows it would train on, carrying the env id.
    assert f'"rllm_env_id": "{env_id}"' in captured.out
    assert "train rows:" in captured.out
    assert not output.exists()


def test_verl_dry_run_refuses_a_native_only_setting(capsys, tiny_model):
    require_verl()
    code = main(
        [
            "--backend", "verl", "--dry-run", "--env", "rllm/FrozenLake-v0",
            "--model", tiny_model, "algorithm.sequence_mode=step",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("rllm-train: bad config:")
    assert "algorithm.sequence_mode" in captured.err
    assert captured.out == ""


@pytest.mark.slow
def test_the_installed_command_dry_runs_verl(tmp_path):
    """The exact command a user types: the console script, the default (shipped) model."""
    require_verl()
    command = shutil.which("rllm-train", path=str(Path(sys.executable).parent))
    assert command, "rllm-train is not installed next to this Python"
    result = subprocess.run(
        [command, "--backend", "verl", "--dry-run", "--env", "rllm/FrozenLake-v0",
         "--output", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "adv_estimator: grpo" in result.stdout
    assert '"rllm_env_id": "rllm/FrozenLake-v0"' in result.stdout
