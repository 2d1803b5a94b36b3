"""The verl backend without a GPU: spec checks, verl's own config validation, data rows, dry-run."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import rllm_envs
from omegaconf import OmegaConf
from rllm_train.verl.compose import AGENT_LOOP_NAME, RunFiles, compose_verl_config
from rllm_train.verl.data import episode_sources, from_verl_row, write_verl_data
from rllm_train.verl.launch import describe, prepare_run, write_run_files
from rllm_train.verl.spec import VerlConfigError, VerlRunSpec
from rllm_train.verl.versions import VerlStatus, VerlUnavailableError, check_status, verl_status

FROZENLAKE = "rllm/FrozenLake-v0"
# The embedded default task (rllm/Arithmetic-v0, in ENV_IDS) under the id older configs use:
# deprecated, still made.
OLD_DEFAULT_TASK = "rllm_train.default_task:rllm_train/Arithmetic-v0"


def spec_for(tmp_path, **changes) -> VerlRunSpec:
    return VerlRunSpec(
        env_id=FROZENLAKE,
        model_path=str(tmp_path / "model"),
        output_dir=str(tmp_path / "run"),
        **changes,
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("verl")
    spec = VerlRunSpec(
        env_id=FROZENLAKE,
        model_path=str(root / "model"),
        output_dir=str(root / "run"),
        algorithm="grpo",
        train_batch_size=16,
        n_samples=4,
        max_prompt_tokens=768,
        max_response_tokens=1536,
        lora_rank=32,
        rollout_engine="sglang",
        max_tasks=64,
        val_env_kwargs={"tasks": "shipped:test"},
        n_gpus_per_node=8,
        nnodes=2,
        loggers=("console", "tensorboard"),
    )
    return prepare_run(spec)


def test_composed_config_carries_our_settings_through_verls_dataclasses(prepared):
    from verl.utils.config import omega_conf_to_dataclass

    config = prepared.config
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert (rollout.name, rollout.n, rollout.prompt_length, rollout.response_length) == (
        "sglang",
        4,
        768,
        1536,
    )
    assert rollout.agent.default_agent_loop == AGENT_LOOP_NAME
    assert omega_conf_to_dataclass(config.algorithm).adv_estimator == "grpo"
    assert config.data.train_batch_size == 16
    assert config.actor_rollout_ref.model.lora_rank == 32
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (2, 8)
    # verl's file logger always: metrics.jsonl is built from it
    assert list(config.trainer.logger) == ["console", "tensorboard", "file"]
    assert config.trainer.val_before_train is True
    assert config.critic.enable is False  # GRPO trains no value model


def test_ppo_gets_a_critic_from_the_policy_weights(tmp_path):
    spec = spec_for(tmp_path, algorithm="ppo", n_samples=1, max_tasks=8, micro_batch_size_per_gpu=1)
    config = compose_verl_config(spec, RunFiles(tmp_path / "run"))
    assert config.algorithm.adv_estimator == "gae"
    assert config.critic.enable is True
    assert config.critic.model.path == str(tmp_path / "model")
    # algorithm.critic_lr_scale (10 by default), as native's value head learns
    assert config.critic.optim.lr == pytest.approx(spec.learning_rate * 10)
    # verl reads the critic's model files while validating: a missing model is caught here.
    with pytest.raises(VerlConfigError, match="could not load a model config"):
        prepare_run(spec)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"algorithm": "grpo", "n_samples": 1}, "n_samples >= 2"),
        ({"algorithm": "dpo"}, "algorithm 'dpo'"),
        ({"rollout_engine": "hf"}, "not served by verl"),
        ({"tensor_parallel_size": 3}, "must divide n_gpus_per_node"),
        ({"mini_batch_size": 3}, "must divide train_batch_size"),
        ({"overrides": ("trainer.nonexistent_key=1",)}, "nonexistent_key"),
        ({"overrides": ("no-equals-sign",)}, "key=value"),
        ({"lora_rank": 1024}, "LoRA ranks up to 512"),
        ({"agent": "rllm_agents.no_such_module:Agent"}, "env.agent .*cannot import"),
        ({"agent": "NoColon"}, "env.agent 'NoColon': not of the form module:name"),
        # 3 tasks x 3 samples cannot be split over 8 training processes.
        ({"train_batch_size": 3, "n_samples": 3, "mini_batch_size": 3}, "9 samples .* for 8"),
        # 4 samples each for 2 processes: not a whole number of micro-batches of 8 (verl would
        # stop inside a worker with an assertion).
        (
            {
                "n_gpus_per_node": 2,
                "train_batch_size": 4,
                "n_samples": 2,
                "micro_batch_size_per_gpu": 8,
            },
            "whole number of micro-batches of 8",
        ),  # fmt: skip
    ],
)
def test_unsupported_combinations_fail_before_ray_with_a_reason(tmp_path, changes, message):
    with pytest.raises(VerlConfigError, match=message):
        prepare_run(spec_for(tmp_path, **changes))


def test_problems_are_listed_together(tmp_path):
    with pytest.raises(VerlConfigError) as raised:
        prepare_run(spec_for(tmp_path, n_samples=0, max_turns=0, rollout_engine="tgi"))
    text = str(raised.value)
    assert "n_samples" in text and "max_turns" in text and "tgi" in text


def test_too_few_tasks_for_a_batch_is_a_config_error(tmp_path):
    with pytest.raises(VerlConfigError, match="fewer than train_batch_size"):
        prepare_run(spec_for(tmp_path, max_tasks=4, train_batch_size=8))


def test_version_checks():
    assert verl_status().supported  # the project's environment has the verified verl
    with pytest.raises(
        VerlUnavailableError, match="not installed: pip install 'rllm-train\\[verl\\]'"
    ):
        check_status(VerlStatus(version=None, missing=()))
    with pytest.raises(VerlUnavailableError, match="verified with verl 0.9.1 but verl 0.8.2"):
        check_status(VerlStatus(version="0.8.2", missing=()))
    with pytest.raises(VerlUnavailableError, match="needs ray"):
        check_status(VerlStatus(version="0.9.1", missing=("ray",)))
    assert check_status(VerlStatus(version="0.9.1", missing=("ray",)), for_training=False)


def test_rows_carry_the_whole_task_and_verls_dataset_reads_them(tmp_path):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    sources = episode_sources(
        FROZENLAKE, {"tasks": "shipped:test"}, agent=None, max_turns=5, max_tasks=6, seed_tasks=0
    )
    path = write_verl_data(sources, tmp_path / "rows.parquet")
    data_config = OmegaConf.create({"filter_overlong_prompts": False, "return_raw_chat": True})
    dataset = RLHFDataset(data_files=[str(path)], tokenizer=None, config=data_config)
    assert len(dataset) == 6
    item = dataset[3]
    assert item["agent_name"] == AGENT_LOOP_NAME and item["index"] == 3
    rebuilt = from_verl_row(item)
    assert rebuilt == sources[3]
    # The env rebuilds the same episode from the row as from its own task set.
    env = gym.make(FROZENLAKE, tasks="shipped:test")
    try:
        own_observation, _ = env.reset(options={"task": dict(env.unwrapped.tasks[3])})
        row_observation, _ = env.reset(seed=rebuilt.seed, options={"task": dict(rebuilt.task)})
    finally:
        env.close()
    assert row_observation == own_observation


def test_rows_of_an_env_without_a_task_set_are_seeds(tmp_path):
    sources = episode_sources(
        "Blackjack-v1", {}, agent=None, max_turns=3, max_tasks=None, seed_tasks=5, seed=100
    )
    assert [(source.task, source.seed) for source in sources] == [
        (None, s) for s in range(100, 105)
    ]
    row = from_verl_row(
        json.loads(
            json.dumps(
                {
                    "rllm_env_id": "Blackjack-v1",
                    "rllm_env_kwargs": "{}",
                    "rllm_task": "",
                    "rllm_seed": 7,
                    "rllm_agent": "",
                    "rllm_max_turns": 3,
                    "rllm_max_tokens_per_turn": 0,
                    "rllm_timeout_s": 0.0,
                    "rllm_program": "",
                }
            )
        )
    )
    assert row.task is None and row.seed == 7 and row.agent is None and row.program is None


def test_rows_not_written_by_us_are_refused():
    with pytest.raises(ValueError, match="not written by rllm_train.verl.data"):
        from_verl_row({"raw_prompt": [], "index": 0})


def test_run_files_register_the_agent_loop_for_verls_workers(prepared):
    files = write_run_files(prepared)
    assert files.train_file.exists() and files.val_file.exists()
    registrations = OmegaConf.load(files.agent_loop_file)
    assert [(entry.name, entry._target_) for entry in registrations] == [
        (AGENT_LOOP_NAME, "rllm_train.verl.agent_loop.RllmAgentLoop"),
        ("rllm_program", "rllm_train.verl.program_loop.RllmProgramLoop"),
    ]
    assert prepared.config.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(
        files.agent_loop_file
    )


def test_dry_run_prints_config_and_data_layout(prepared):
    text = describe(prepared)
    assert "adv_estimator: grpo" in text
    assert "train rows: 64" in text and "val rows:   200" in text
    assert "16 tasks x 4 = 64 episodes" in text
    assert '"rllm_env_id": "rllm/FrozenLake-v0"' in text


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [*rllm_envs.ENV_IDS, OLD_DEFAULT_TASK])
def test_dry_run_works_for_every_built_in_env(tmp_path, env_id):
    spec = VerlRunSpec(
        env_id=env_id,
        model_path=str(tmp_path / "model"),
        output_dir=str(tmp_path / "run"),
        max_tasks=16,
    )
    text = describe(prepare_run(spec))
    assert f"data_source: {env_id}" not in text  # rows are data, not config
    assert f'"rllm_env_id": "{env_id}"' in text


def test_compose_is_pure(tmp_path):
    spec = spec_for(tmp_path)
    files = RunFiles(tmp_path / "run")
    first, second = compose_verl_config(spec, files), compose_verl_config(spec, files)
    assert OmegaConf.to_yaml(first) == OmegaConf.to_yaml(second)
    assert not (tmp_path / "run").exists()  # composing writes nothing


def test_the_next_prompt_must_extend_the_last_one():
    from rllm_train.verl.agent_loop import PrefixBrokenError, appended_context

    first = [{"role": "user", "content": "Observation 1"}]
    reply = {"role": "assistant", "content": "Down"}
    following = {"role": "user", "content": "Observation 2"}
    assert appended_context(first, [*first, reply, following]) == [*first, reply]
    with pytest.raises(PrefixBrokenError, match="append-only"):
        appended_context(first, [{"role": "user", "content": "rewritten"}, reply, following])
    with pytest.raises(PrefixBrokenError, match="assistant message"):
        appended_context(first, [*first, following])


def test_an_rllm_train_config_maps_onto_verl(tmp_path):
    from rllm_train.config import build_config
    from rllm_train.verl import dry_run
    from rllm_train.verl.from_config import spec_from_config

    config = build_config(
        overrides=[
            "trainer.backend=verl",
            f"model.name={tmp_path / 'model'}",
            f"trainer.output={tmp_path}",
            "env.id=rllm/FrozenLake-v0",
            "env.kwargs.tasks=shipped:test",
            "rollout.tasks_per_step=8",
            "rollout.n=4",
            "rollout.max_turns=5",
            "rollout.max_response_tokens=64",
            "rollout.max_prompt_tokens=2048",
            "algorithm.name=rloo",
            "trainer.steps=12",
            "trainer.lr=3e-6",
            "model.lora_rank=16",
            "trainer.val_every=4",
            "trainer.val_tasks=10",
        ]
    )
    spec = spec_from_config(config)
    assert (spec.train_batch_size, spec.n_samples, spec.total_steps) == (8, 4, 12)
    assert (spec.max_tokens_per_turn, spec.max_turns, spec.max_response_tokens) == (64, 5, 2048)
    assert spec.env_kwargs == {"tasks": "shipped:test"} and spec.lora_rank == 16
    text = dry_run(config)
    assert "adv_estimator: rloo" in text and "lr: 3.0e-06" in text
    # Every step's tasks, in the order the steps play them (12 steps x 8 tasks), and the
    # first 10 validation seeds: the same tasks the native backend would play.
    assert "train rows: 96" in text and "val rows:   10" in text
    assert '"rllm_max_tokens_per_turn": 64' in text


def test_native_only_settings_are_refused_for_verl(tmp_path):
    from rllm_train.config import build_config
    from rllm_train.verl.from_config import spec_from_config

    config = build_config(overrides=["algorithm.sequence_mode=step", f"model.name={tmp_path}"])
    with pytest.raises(VerlConfigError, match="sequence_mode"):
        spec_from_config(config)
    config = build_config(
        overrides=["algorithm.rollout_correction.rollout_is=sequence", f"model.name={tmp_path}"]
    )
    with pytest.raises(VerlConfigError, match="verl.rollout_is"):
        spec_from_config(config)


def test_a_launch_without_gpus_stops_before_ray_with_what_to_do(tmp_path, monkeypatch):
    import torch
    from rllm_train.verl import run

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the check passes by design")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(VerlConfigError, match="this machine has none: use --backend native"):
        run(spec_for(tmp_path))
    assert not (tmp_path / "run").exists()  # nothing written, no Ray started


def test_verls_sampling_params_map_onto_rllm_engines():
    from rllm_train.verl.engine_server import sampling_from_verl

    verl_params = {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": -1,
        "repetition_penalty": 1.0,
        "logprobs": True,
        "max_tokens": 12,
    }
    sampling = sampling_from_verl(verl_params, default_max_tokens=99)
    assert (sampling.temperature, sampling.top_p, sampling.max_tokens, sampling.logprobs) == (
        0.7,
        0.9,
        12,
        True,
    )
    assert sampling_from_verl({"temperature": 0}, default_max_tokens=99).max_tokens == 99
    with pytest.raises(ValueError, match="top_k=20 is not supported"):
        sampling_from_verl({**verl_params, "top_k": 20}, default_max_tokens=8)


def test_the_engine_server_reports_a_cut_reply_and_seeds_each_request(tiny_model):
    """verl reads ``stop_reason="length"`` as a reply cut at max_tokens (its own partial-rollout
    client does), and its rollout adds a per-request ``seed`` for deterministic sampling."""
    import asyncio

    from rllm_agents.engines.local import LocalEngine
    from rllm_agents.models import load_model, load_tokenizer
    from rllm_train.verl.engine_server import EngineServerClient

    tokenizer = load_tokenizer(tiny_model)
    engine = LocalEngine(load_model(tiny_model), tokenizer, max_batch_size=2)
    client = EngineServerClient(engine)
    prompt = tokenizer.encode("Count: one, two, three,")

    def generate(**sampling):
        params = {"temperature": 1.0, "top_p": 1.0, "logprobs": True, **sampling}
        output = asyncio.run(client.generate("r", prompt_ids=prompt, sampling_params=params))
        return output.token_ids, output.stop_reason

    try:
        tokens, reason = generate(max_tokens=3)
        assert len(tokens) == 3 and reason == "length"
        draws = [generate(max_tokens=8, seed=seed)[0] for seed in (11, 11, 12, 13)]
        assert draws[0] == draws[1]  # the same seed, the same reply
        assert draws[0] != draws[2] or draws[0] != draws[3]  # other seeds draw other replies
    finally:
        asyncio.run(engine.aclose())


def test_each_training_batch_is_checked_against_the_failure_rule(tmp_path):
    from rllm_train.config import build_config
    from rllm_train.verl.compose import MANAGER_CLASS
    from rllm_train.verl.failure_check import MAX_FAILURE_RATE_KEY, RllmAgentLoopManager
    from rllm_train.verl.from_config import spec_from_config

    config = build_config(
        overrides={
            "trainer.backend": "verl",
            "model.name": str(tmp_path / "model"),
            "trainer.output": str(tmp_path / "run"),
            "trainer.max_failure_rate": 0.25,
        }
    )
    composed = compose_verl_config(spec_from_config(config), RunFiles(tmp_path / "run"))
    assert composed.actor_rollout_ref.rollout.agent.agent_loop_manager_class == MANAGER_CLASS
    assert OmegaConf.select(composed, MAX_FAILURE_RATE_KEY) == 0.25
    module, _, name = MANAGER_CLASS.rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name) is RllmAgentLoopManager
