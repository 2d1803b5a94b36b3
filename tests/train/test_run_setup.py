"""The shared layer (``rllm_train.run``): what both backends derive from one config, alone."""

from __future__ import annotations

import pytest
from rllm_agents.agents.text_agent import TextAgent
from rllm_train import AgentTrainer
from rllm_train.config import ConfigError, build_config
from rllm_train.run.algorithm import ALGORITHMS, algorithm, names_where
from rllm_train.run.refusals import refusals
from rllm_train.run.setup import setup_run
from rllm_train.run.specs import AgentSpec, EnvSpec, agent_spec
from rllm_train.run.tasks import TaskDraw

from tests.parts import require_module


class GreetingAgent(TextAgent):
    def __init__(self, greeting: str = "hi", **kwargs) -> None:
        self.greeting = greeting
        super().__init__(**kwargs)


def test_the_algorithm_table_says_what_each_is_made_of():
    assert algorithm("ppo").learns_values and algorithm("ppo").estimator == "gae"
    assert algorithm("grpo").compares_group and algorithm("rloo").compares_group
    assert not algorithm("sft").plays_tasks and algorithm("rae").role_baselines
    assert algorithm("remax").greedy_baseline and not algorithm("remax").runs_on("native")
    for entry in ALGORITHMS.values():  # every backend that cannot run one says why
        for backend in {"native", "verl"} - entry.backends:
            assert entry.refused[backend], (entry.name, backend)
    assert names_where(lambda a: a.learns_values) == ("ppo",)
    with pytest.raises(ValueError, match="unknown algorithm 'dpo'"):
        algorithm("dpo")


def test_each_backend_refuses_what_it_cannot_honour_with_the_key_and_the_reason():
    native = build_config(overrides={"algorithm.name": "rae", "rollout.tree.enabled": False})
    reasons = refusals(native, "verl")
    assert [reason.split(":")[0] for reason in reasons] == ["algorithm.name"]
    assert "per-role" in reasons[0] and "--backend native" in reasons[0]
    assert refusals(native, "native") == []
    remax = build_config(overrides={"trainer.backend": "verl", "algorithm.name": "remax"})
    assert refusals(remax, "native")[0].startswith("algorithm.name: remax runs on --backend verl")
    several = build_config(
        overrides={"trainer.save_episodes": True, "algorithm.sequence_mode": "step"}
    )
    keys = [reason.split(":")[0] for reason in refusals(several, "verl")]
    assert keys == ["algorithm.sequence_mode", "trainer.save_episodes"]
    with pytest.raises(ConfigError, match="trainer.save_episodes"):  # before any folder
        build_config(overrides={"trainer.backend": "verl", "trainer.save_episodes": True})


def test_the_agent_is_made_with_every_argument_in_order():
    config = build_config(
        overrides={
            "env.agent": f"{__name__}:GreetingAgent",
            "env.system_prompt": "Add.",
            "env.agent_args": {"greeting": "hello"},
        }
    )
    spec = agent_spec(config.env)
    # The trainer's default prompt for the default env, then env.system_prompt, then the
    # agent's own arguments.
    assert dict(spec.arguments) == {"system_prompt": "Add.", "greeting": "hello"}
    agent = spec.build()
    assert isinstance(agent, GreetingAgent) and agent.greeting == "hello"
    assert agent.system_prompt == "Add."
    given = agent_spec(config.env, agent_args={"greeting": "yo", "system_prompt": "Sum."})
    assert dict(given.arguments) == {"system_prompt": "Sum.", "greeting": "yo"}
    # As verl's rows carry it, and as its workers read it back.
    assert AgentSpec.from_json(spec.to_json()) == spec
    assert AgentSpec.from_json("pkg.mod:Agent") == AgentSpec("pkg.mod:Agent")
    assert AgentSpec.from_json("") is None
    plain = agent_spec(build_config().env)
    assert dict(plain.arguments) == {"system_prompt": "You are a calculator."}


def test_a_bad_agent_or_env_class_is_named_at_once():
    with pytest.raises(
        ConfigError, match="env.agent 'no_such_pkg:Agent': cannot import 'no_such_pkg'"
    ):
        agent_spec(build_config(overrides={"env.agent": "no_such_pkg:Agent"}).env)
    with pytest.raises(ConfigError, match="env.entry_point 'NoColon': not of the form module:name"):
        EnvSpec("x", entry_point="NoColon").make()


def test_agent_trainer_records_the_agent_and_its_arguments_for_both_backends(tmp_path):
    trainer = AgentTrainer(
        agent_class=GreetingAgent,
        agent_args={"greeting": "hey"},
        config={"trainer.output": str(tmp_path), "env.system_prompt": "Add."},
    )
    assert trainer.config.env.agent == f"{__name__}:GreetingAgent"
    assert trainer.config.env.agent_args == {"greeting": "hey"}
    setup = trainer.setup()
    assert setup.agent.given_class is GreetingAgent
    assert dict(setup.agent.arguments) == {"system_prompt": "Add.", "greeting": "hey"}
    objects = AgentTrainer(
        agent_class=GreetingAgent,
        agent_args={"greeting": object()},  # not a plain value: the native trainer's only
        config={"trainer.output": str(tmp_path)},
    )
    assert objects.config.env.agent_args == {}
    assert "greeting" in objects.setup().agent.arguments


def test_the_setup_plans_the_same_tasks_every_time():
    config = build_config(overrides={"trainer.steps": 3, "rollout.tasks_per_step": 2})
    first, second = setup_run(config), setup_run(config)
    draws = first.training_draws()
    assert len(draws) == 6 and draws == second.training_draws()
    assert all(isinstance(draw, TaskDraw) and draw.row is not None for draw in draws)
    plan = first.curriculum().plan(1)  # step 2's tasks, as the native trainer plans them
    assert [(d.seed, d.row) for d in draws[2:4]] == [
        (seed, dict(row)) for seed, row in zip(plan.seeds, plan.rows, strict=True)
    ]
    validation = first.validation_draws()
    assert len(validation) == config.trainer.val_tasks and validation[0].row is not None


@pytest.mark.parametrize(
    "overrides, turns",
    [
        ({}, 3),  # the default task: one turn per addend
        ({"env.id": "rllm/Arithmetic-v0"}, 1),
        ({"env.id": "rllm/FrozenLake-v0", "env.kwargs": {"size": 3}}, 18),  # 2 x size^2
        ({"env.id": "rllm/FrozenLake-v0", "rollout.max_turns": 4}, 4),  # the user's own stands
        ({"env.id": "kuhn_poker_v0"}, 1),  # a game counts multiagent.max_cycles instead
    ],
)
def test_the_run_plays_the_envs_own_turn_limit_unless_told_otherwise(overrides, turns):
    config = build_config(overrides=overrides)
    assert setup_run(config).config.rollout.max_turns == turns


def test_tree_branch_turns_are_checked_against_the_limit_once_it_is_known():
    tree = {"rollout.tree.enabled": True, "rollout.tree.branch_turns": [3]}
    with pytest.raises(ConfigError, match="rollout.tree.branch_turns.*0 \\(the reset\\) to"):
        setup_run(build_config(overrides=tree))  # RunningTotal: 3 turns, so branches at 0-2
    assert setup_run(build_config(overrides={**tree, "rollout.tree.branch_turns": [2]}))


@pytest.mark.parametrize(
    "overrides, backend, engine",
    [
        ({}, "native", "llamacpp"),  # the embedded model on a CPU: measured fastest
        ({"model.name": "tiny"}, "native", "local"),  # llama.cpp serves the embedded GGUF only
        ({}, "verl", "local"),  # verl schedules its own rollouts
        ({"rollout.tree.enabled": True, "rollout.tree.branch_turns": [1]}, "native", "local"),
        ({"rollout.engine": "process"}, "native", "process"),  # the user's own stands
        ({"algorithm.name": "sft", "sft.data": ["runs/x"]}, "native", "local"),  # no play
    ],
)
def test_the_auto_engine_is_llamacpp_only_where_it_can_play_the_run(overrides, backend, engine):
    require_module("llama_cpp", "llama-cpp-python comes with rllm-agents[smollm2]")
    from rllm_train.run.defaults import on_cpu, resolve_engine
    from rllm_train.run.setup import is_multiagent

    assert on_cpu("auto", cuda_available=False) and not on_cpu("auto", cuda_available=True)
    config = build_config(overrides={"trainer.device": "cpu", **overrides})
    resolve_engine(config, backend, is_multiagent(config.env.id))
    assert config.rollout.engine == engine
