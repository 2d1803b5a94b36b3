"""Training on a train set and validating on held-out rows: data.train / data.val, the env's
test split by default, AgentTrainer's documented form (native steps and verl dry runs) and Hydra.

The real verl run of that form - PPO on given training rows, validated on held-out ones before
training and at the last step - is tests/train/test_verl_vllm.py's, with verl's vLLM rollout:
one verl launch covers both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rllm_agents import TextAgent
from rllm_envs import DatasetRegistry
from rllm_envs.arithmetic import ArithmeticEnv, held_out_pairs, training_pairs
from rllm_envs.running_total import held_out_tasks, training_tasks
from rllm_train import AgentTrainer, ConfigError, TrainConfig, build_config
from rllm_train.config import from_mapping
from rllm_train.datasets import run_data, step_rows

from tests.parts import require_module
from tests.train.conftest import run_overrides

CONFIG_DIR = Path(__file__).resolve().parents[2] / "packages/rllm-train/src/rllm_train/config"


def test_an_env_with_a_shipped_pair_trains_on_train_and_validates_on_test():
    default = run_data(build_config())  # the embedded default: rllm/RunningTotal-v0
    assert list(default.train) == training_tasks() and list(default.val) == held_out_tasks()
    data = run_data(build_config(overrides={"env.id": "rllm/Arithmetic-v0"}))
    assert list(data.train) == training_pairs() and list(data.val) == held_out_pairs()
    frozen = run_data(build_config(overrides={"env.id": "rllm/FrozenLake-v0"}))
    assert frozen.val.name == "registry:frozenlake/test"
    chosen = run_data(
        build_config(overrides={"env.id": "rllm/Arithmetic-v0", "env.kwargs": {"max_operand": 4}})
    )
    assert chosen.train is None and chosen.val is None  # the env picks its own tasks
    named = run_data(build_config(overrides={"data.val": "gsm8k:test", "env.id": "rllm/Math-v0"}))
    assert named.val.name == "registry:gsm8k/test" and named.train.name == "registry:gsm8k/train"
    with pytest.raises(ConfigError, match="data.train"):
        run_data(build_config(overrides={"data.train": "no_such_set:train"}))
    rows = step_rows(data.train, 0, 3, 4)
    assert rows == step_rows(data.train, 0, 3, 4) and len(rows) == 4  # pure: resumable


def test_native_run_validates_held_out_rows_before_and_after(tmp_path, tiny_model):
    overrides = run_overrides(
        tmp_path / "run",
        tiny_model,
        **{
            "trainer.validate_held_out": True,
            "trainer.val_tasks": 3,
            "rollout.val_n": 2,
            "trainer.tensorboard": False,
        },
    )
    trainer = AgentTrainer(
        agent_class=TextAgent,
        env_class=ArithmeticEnv,
        config=overrides,
        train_dataset=DatasetRegistry.load_dataset("arithmetic", "train"),
        val_dataset=DatasetRegistry.load_dataset("arithmetic", "test"),
        agent_args={"system_prompt": "You are a calculator."},
        env_args={},
    )
    rows = trainer.train()
    assert [row["step"] for row in rows] == [0, 1, 2]
    first, last = rows[0], rows[-1]
    for row in (first, last):
        assert {"val/reward_mean", "val/accuracy", "val/pass@1", "val/pass@2"} <= set(row)
    held_out = {row["task_id"] for row in held_out_pairs()}
    trained = {task for row in rows[1:] for task in row["task_ids"]}
    assert trained and not trained & held_out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["val_steps"] == [0, 2] and "val_reward_last" in summary
    assert (tmp_path / "run" / "reward_curve.png").is_file()
    assert summary["config"]["env"]["entry_point"].endswith(":ArithmeticEnv")


def test_verl_dry_run_takes_the_documented_form(tmp_path):
    require_module("verl", "the verl backend needs rllm-train[verl]")
    trainer = AgentTrainer(
        agent_class=TextAgent,
        env_class="rllm/Arithmetic-v0",
        config={"trainer.backend": "verl", "model.name": "tiny", "trainer.output": str(tmp_path)},
        train_dataset=DatasetRegistry.load_dataset("arithmetic", "train").take(6),
        val_dataset=DatasetRegistry.load_dataset("arithmetic", "test").take(2),
    )
    layout = trainer.dry_run()
    assert "# data layout" in layout
    assert trainer.config.data.train.endswith("train.jsonl")
    assert trainer.config.env.agent == "rllm_agents.agents.text_agent:TextAgent"


def test_verl_dry_run_lays_out_the_given_rows(tmp_path):
    require_module("verl", "the verl backend needs rllm-train[verl]")
    train = DatasetRegistry.load_dataset("arithmetic", "train").take(6)
    trainer = AgentTrainer(
        env_class="rllm/Arithmetic-v0",
        config={
            "trainer.backend": "verl",
            "model.name": "tiny",
            "trainer.output": str(tmp_path),
            "trainer.steps": 3,
        },
        train_dataset=train,
        val_dataset=DatasetRegistry.load_dataset("arithmetic", "test").take(2),
    )
    layout = trainer.dry_run()
    # Each of the 3 steps' 4 tasks, drawn from the 6 given rows, in the order they are played.
    assert "train rows: 12 " in layout and "val rows:   2 " in layout
    first_row = json.loads(layout.split("# first row:\n# ", 1)[1].splitlines()[0])
    assert json.loads(first_row["rllm_task"]) in [dict(row) for row in train]


def test_hydra_config_is_our_config():
    hydra = require_module("hydra", "Hydra configs need hydra-core")
    shipped = yaml.safe_load((CONFIG_DIR / "agent_trainer.yaml").read_text())
    assert shipped == TrainConfig().to_dict(), "regenerate: python -m rllm_train.config"
    with hydra.initialize_config_module("rllm_train.config", version_base=None):
        config = hydra.compose("ppo_trainer", overrides=["trainer.steps=3", "data.val=gsm8k:test"])
    trainer = AgentTrainer(config=config)
    assert trainer.config.trainer.steps == 3 and trainer.config.data.val == "gsm8k:test"
    assert from_mapping({"trainer": {"steps": 2}}).trainer.steps == 2
