"""verl's asynchronous trainers (``verl.mode=one_step_off | fully_async``) on this CPU.

The config tests check what each mode composes and refuses, with no Ray. The slow ones run
``rllm-train --backend verl`` fully async for two real steps on the multi-turn lake env (the
rollout on a logical GPU of its own, every update carried to it by rllm's object-store
checkpoint engine), and move weights through that engine directly. The one-step-off run is the
agent program's (test_verl_program.py): one verl run shows both. The lake of the fully async
run is served by ``rllm-envs serve`` and played as ``rllm/Remote-v0``: verl's agent loops play
a remote env as they play a local one (no verl run of its own for that: each costs minutes).

What the runs show beyond "it trained": verl's PPO KL between the policy being trained and the
rollout's own log-probs. One step off, step 1 trains on the initial policy's episodes (KL zero
up to float error: the engine and the trainer hold the same weights) and step 2 on episodes of
the policy one update old (KL clearly above zero). Fully async with verl's default staleness and
a two-task batch, the rollout waits for each sync, so step 2's episodes come from the updated
policy and the KL is zero again: the engine holds the weights the transfer delivered.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
import torch
from rllm_train.verl.compose import RunFiles, compose_verl_config
from rllm_train.verl.launch import prepare_run
from rllm_train.verl.metrics_bridge import record_step
from rllm_train.verl.spec import VerlConfigError, VerlRunSpec
from rllm_train.verl.weight_mailbox import WeightsMailbox

from tests.envs.test_remote import serve, stop
from tests.train.reply_length import LAKE_ENV_ID, LAKE_MODULE_ENV_ID
from tests.train.test_verl_training import rllm_train, trained_rows

FROZENLAKE = "rllm/FrozenLake-v0"
# The trainer's and the engine's float32 log-probs of the same tokens under the same weights
# differ by rounding only (verl's PPO KL, their mean difference, stays below this).
SAME_POLICY_KL = 1e-5


def spec_for(tmp_path, **changes) -> VerlRunSpec:
    settings = {
        "env_id": FROZENLAKE,
        "model_path": str(tmp_path / "model"),
        "output_dir": str(tmp_path / "run"),
        "device": "cpu",
        "strategy": "fsdp2",
        "rollout_engine": "rllm_local",
        "n_gpus_per_node": 1,
        "train_batch_size": 4,
        "n_samples": 2,
        "total_steps": 3,
        **changes,
    }
    return VerlRunSpec(**settings)


def test_one_step_off_composes_a_separate_rollout_fed_by_our_checkpoint_engine(tmp_path):
    config = prepare_run(spec_for(tmp_path, mode="one_step_off", rollout_gpus_per_node=2)).config
    rollout = config.actor_rollout_ref.rollout
    assert config.actor_rollout_ref.hybrid_engine is False
    assert (config.rollout.n_gpus_per_node, rollout.n_gpus_per_node) == (2, 2)
    assert rollout.checkpoint_engine.backend == "rllm_object_store"
    assert rollout.checkpoint_engine.custom_backend_module == "rllm_train.verl.cpu.weight_transfer"
    assert config.algorithm.rollout_correction.bypass_mode is True
    assert "async_training" not in config


def test_fully_async_counts_tasks_not_batches(tmp_path):
    spec = spec_for(tmp_path, mode="fully_async", mini_batch_size=2, staleness=0.5, sync_every=2)
    config = prepare_run(spec).config  # verl's validate_config passes on the trainer's batch
    assert (config.data.train_batch_size, config.data.gen_batch_size) == (0, 1)
    assert config.rollout.total_rollout_steps == 3 * 4  # steps x tasks per step
    training = config.async_training
    assert (training.require_batches, training.staleness_threshold) == (2, 0.5)
    assert training.trigger_parameter_sync_step == 2
    assert config.actor_rollout_ref.rollout.multi_turn.enable is True  # else not our agent loop
    assert config.actor_rollout_ref.actor.use_rollout_log_probs is True


def test_sync_mode_composes_what_it_always_did(tmp_path):
    config = compose_verl_config(spec_for(tmp_path), RunFiles(tmp_path / "run"))
    assert config.actor_rollout_ref.hybrid_engine is True
    assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == "naive"
    assert "async_training" not in config and "rollout" not in config


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mode": "overlapped"}, "verl.mode 'overlapped' is not one of"),
        ({"mode": "one_step_off", "rollout_gpus_per_node": 0}, "rollout_gpus_per_node"),
        ({"mode": "one_step_off", "algorithm": "remax", "n_samples": 1}, "greedy baseline"),
        ({"mode": "fully_async", "algorithm": "ppo", "n_samples": 1}, "separation/ray_trainer"),
        ({"mode": "fully_async", "val_env_kwargs": {}}, "trainer.val_every=0"),
        ({"mode": "fully_async", "staleness": -1.0}, "staleness must be >= 0"),
        ({"mode": "fully_async", "sync_every": 0}, "sync_every must be at least 1"),
        ({"mode": "fully_async", "total_steps": None}, "needs trainer.steps"),
    ],
)
def test_what_a_mode_cannot_run_is_refused_with_the_reason(tmp_path, changes, message):
    with pytest.raises(VerlConfigError, match=message):
        prepare_run(spec_for(tmp_path, **changes))


def test_the_mailbox_hands_each_version_to_every_reader_once():
    async def exchange():
        mailbox = WeightsMailbox()
        early = asyncio.ensure_future(mailbox.collect())  # a reader before the post waits
        await asyncio.sleep(0)
        assert not early.done()
        await mailbox.post(7, ["bucket"], readers=2)
        late = await mailbox.collect()
        with pytest.raises(RuntimeError, match="must not overlap"):
            await mailbox.post(8, [], readers=1)
        assert await early == late == (7, ["bucket"])
        await mailbox.post(8, [], readers=1)  # both read: the next version may come
        assert await mailbox.collect() == (8, [])

    asyncio.run(exchange())


def test_buckets_bound_their_size_and_keep_the_order():
    from rllm_train.verl.cpu.weight_transfer import bucketed

    async def buckets(sizes: list[int], limit: int) -> list[list[str]]:
        async def tensors():
            for index, size in enumerate(sizes):
                yield f"w{index}", torch.zeros(size, dtype=torch.uint8)

        return [[name for name, _ in bucket] async for bucket in bucketed(tensors(), limit)]

    # A tensor larger than the limit travels alone; the rest fill buckets in order.
    assert asyncio.run(buckets([3, 3, 9, 2, 2, 2], limit=6)) == [
        ["w0", "w1"],
        ["w2"],
        ["w3", "w4", "w5"],
    ]


def test_fully_async_metrics_are_filed_under_their_training_step():
    assert record_step({"step": 3, "data": {"training/global_step": 2.0, "x": 1}}) == 2
    assert record_step({"step": 3, "data": {"fully_async/rollouter/idle_ratio": 0.5}}) == 3


# ---- real runs ---------------------------------------------------------------------------------

RUN_STEPS = ("--steps", "2")


@pytest.fixture(scope="module")
def ray_cluster(verl_ray_head) -> str:
    """The verl tests' shared cluster (tests/train/conftest.py)."""
    return verl_ray_head.address()


@pytest.fixture(scope="module")
def served_lake():
    """The runs' lake (rewarded by reply length) served by ``rllm-envs serve``: its URL."""
    process, url = serve(LAKE_MODULE_ENV_ID)
    yield url
    stop(process)


def assert_two_real_steps(output: Path) -> list[dict]:
    rows = trained_rows(output)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row
        assert math.isfinite(row["loss"]) and math.isfinite(row["reward_mean"]), row
    summary = json.loads((output / "summary.json").read_text())
    assert summary["backend"] == "verl" and summary["reported_steps"] == [1, 2]
    return rows


@pytest.mark.slow
def test_object_store_engine_carries_every_tensor_to_every_reader(ray_cluster):
    import ray
    from rllm_train.verl.cpu.weight_transfer import ObjectStoreCheckpointEngine as Engine

    weights = {"embed": torch.randn(64, 8), "norm": torch.ones(8), "head": torch.randn(8, 64)}
    sender = Engine(bucket_size=2048, is_master=True)
    readers = [Engine(bucket_size=2048) for _ in range(2)]

    async def transfer():
        metadata = [sender.prepare()] + [reader.prepare() for reader in readers]
        sender_kwargs, reader_kwargs = Engine.build_topology(1, len(readers), metadata)
        sender.init_process_group(**{key: values[0] for key, values in sender_kwargs.items()})
        for index, reader in enumerate(readers):
            reader.init_process_group(
                **{key: values[index] for key, values in reader_kwargs.items()}
            )

        async def receive(reader):
            return [item async for item in reader.receive_weights(global_steps=5)]

        received = await asyncio.gather(
            *[receive(reader) for reader in readers], sender.send_weights(iter(weights.items()), 5)
        )
        return received[:-1]

    ray.init(address=ray_cluster, namespace="rllm-weight-transfer-test")
    try:
        for received in asyncio.run(transfer()):
            assert [name for name, _ in received] == list(weights)
            for name, tensor in received:
                assert torch.equal(tensor, weights[name])
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_fully_async_trains_on_weights_the_transfer_delivered(tmp_path, ray_cluster, served_lake):
    # The lake played remotely: each agent loop makes rllm/Remote-v0 from the row's id and
    # kwargs (the server checked to serve the lake), in verl's agent-loop worker processes.
    # This --env comes after RUN_FLAGS' local lake, and the last one counts.
    remote_lake = ("--env", "rllm/Remote-v0", f"env.kwargs.url={served_lake}",
                   f"env.kwargs.env={LAKE_ENV_ID}")  # fmt: skip
    rllm_train(tmp_path, *RUN_STEPS, "verl.mode=fully_async", *remote_lake, ray_address=ray_cluster)
    rows = assert_two_real_steps(tmp_path)
    # Every episode reached the server and was rewarded there: a failed one scores 0 (and
    # fully async has no failure rule to stop the run).
    assert all(row["reward_min"] > 0 for row in rows), rows
    assert [row["fully_async/count/current_param_version"] for row in rows] == [0, 1]
    second = rows[-1]
    assert second["fully_async/count/stale_trajectory_processed"] == 0  # made by version 1
    assert abs(second["actor/ppo_kl"]) < SAME_POLICY_KL, second["actor/ppo_kl"]
    assert second["time/weight_sync_s"] > 0
