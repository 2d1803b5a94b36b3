"""One verl actor update, computed by a 1-process and by a 2-process FSDP2 worker group.

What :mod:`tests.train.test_verl_sharded_update` runs inside its Ray cluster. This module is
imported only in the cluster's CPU-mode processes (a Ray task drives the worker groups, as verl's
task runner does in a run): the pytest process never imports verl's workers, before which the
CPU mode's patches must load (rllm_train.verl.cpu.patches).

The actor's settings are the ones a CPU run of ``rllm-train --backend verl`` gets: the config
is composed by :func:`rllm_train.verl.compose.compose_verl_config` and turned into verl's own
dataclasses (``FSDPActorConfig`` with its ``FSDPEngineConfig`` and ``FSDPOptimizerConfig``), then
into a ``TrainingWorkerConfig`` as verl's ``ActorRolloutRefWorker.init_model`` does.
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import ray
import torch
from rllm_train.verl.compose import RunFiles, compose_verl_config
from rllm_train.verl.spec import CPU_ROLLOUT, CPU_STRATEGY, VerlRunSpec
from tensordict import TensorDict
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.model import compute_position_id_with_mask
from verl.workers.config import TrainingWorkerConfig
from verl.workers.engine_workers import TrainingWorker
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

SEED = 0
LEARNING_RATE = 1e-3  # the trainer tests' trainer.lr
TEMPERATURE = 1.0  # the rollout's, which the trainer passes to the update
# Two tasks of four samples each, as GRPO groups them. verl hands each data-parallel rank a
# contiguous half of the batch, so rank 0 trains task A's long replies and rank 1 task B's short
# ones: unequal token counts, which is what makes the global-token normalisation matter.
SAMPLES_PER_TASK = 4
PROMPT_LENGTHS = (7, 5, 7, 5, 9, 4, 9, 4)
# Each reply: (model tokens, env tokens, model tokens); env tokens are outside the loss mask,
# as in a multi-turn episode.
REPLY_SHAPES = (
    (14, 4, 10),
    (20, 0, 0),
    (9, 3, 12),
    (24, 0, 0),
    (4, 0, 0),
    (3, 2, 2),
    (6, 0, 0),
    (5, 0, 0),
)
REWARDS = (1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 1.0, 0.0)


def training_config(model_path: str):
    """The actor of a CPU run of this batch's shape (two tasks, four samples each, one mini-batch),
    as ``(FSDPActorConfig, TrainingWorkerConfig)``.

    Among its settings: strategy fsdp2 in fp32 (parameters, gradient reduction, buffers),
    AdamW (betas 0.9/0.999, weight decay 0.01, constant learning rate), gradients clipped to norm
    1, PPO clip ratio 0.2, loss aggregation token-mean, no entropy or KL term, micro-batches of 2
    per process, padded (not packed) inputs with SDPA attention, gradient checkpointing.
    """
    spec = VerlRunSpec(
        env_id="rllm/Arithmetic-v0",
        model_path=model_path,
        device="cpu",
        strategy=CPU_STRATEGY,
        rollout_engine=CPU_ROLLOUT,
        train_batch_size=len(PROMPT_LENGTHS) // SAMPLES_PER_TASK,
        n_samples=SAMPLES_PER_TASK,
        learning_rate=LEARNING_RATE,
        n_gpus_per_node=2,
        seed=SEED,
    )
    with tempfile.TemporaryDirectory() as root:  # composing writes nothing; paths only
        config = compose_verl_config(spec, RunFiles(Path(root)))
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    actor.model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    worker = TrainingWorkerConfig(
        model_type="language_model",
        model_config=actor.model_config,
        engine_config=actor.engine,
        optimizer_config=actor.optim,
        checkpoint_config=actor.checkpoint,
    )
    # What ActorRolloutRefWorker.init_model copies into the engine config from the actor and
    # rollout sections.
    engine = worker.engine_config
    engine.use_dynamic_bsz = config.actor_rollout_ref.actor.use_dynamic_bsz
    engine.max_token_len_per_gpu = config.actor_rollout_ref.actor.ppo_max_token_len_per_gpu
    engine.micro_batch_size_per_gpu = config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    rollout = config.actor_rollout_ref.rollout
    engine.infer_max_token_len_per_gpu = rollout.log_prob_max_token_len_per_gpu
    engine.infer_micro_batch_size_per_gpu = rollout.log_prob_micro_batch_size_per_gpu
    engine.use_remove_padding = actor.model_config.use_remove_padding
    return actor, worker


class WeightReadingWorker(TrainingWorker):
    """verl's TrainingWorker plus one read-only call: the full weights, gathered from the FSDP2
    shards by verl's own weight-sync export (``get_per_tensor_param``)."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def full_weights(self) -> dict[str, torch.Tensor] | None:
        params, _ = self.engine.get_per_tensor_param()
        weights = {name: tensor.detach().to("cpu", copy=True) for name, tensor in params}
        return weights if self.rank == 0 else None  # every rank joins the gather


def worker_group(config, processes: int) -> RayWorkerGroup:
    return RayWorkerGroup(
        resource_pool=RayResourcePool(process_on_nodes=[processes]),
        ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(WeightReadingWorker), config=config),
    )


def padded_batch(vocab_size: int) -> dict[str, torch.Tensor]:
    """The rollout's batch as verl's trainer holds it: left-padded prompts, right-padded replies,
    and GRPO's advantages (verl's own estimator) of made-up rewards."""
    generator = torch.Generator().manual_seed(SEED)
    prompt_width = max(PROMPT_LENGTHS)
    reply_width = max(sum(shape) for shape in REPLY_SHAPES)
    rows = len(PROMPT_LENGTHS)
    # Token 0 is the tiny model's pad token: real tokens are drawn above it.
    input_ids = torch.randint(
        1, vocab_size, (rows, prompt_width + reply_width), generator=generator
    )
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros(rows, reply_width, dtype=torch.long)
    for row, (prompt, (first, env, second)) in enumerate(
        zip(PROMPT_LENGTHS, REPLY_SHAPES, strict=True)
    ):
        attention_mask[row, prompt_width - prompt : prompt_width + first + env + second] = 1
        response_mask[row, :first] = 1
        response_mask[row, first + env : first + env + second] = 1
    input_ids = input_ids * attention_mask
    rewards = torch.zeros(rows, reply_width)
    rewards[torch.arange(rows), response_mask.cumsum(-1).argmax(-1)] = torch.tensor(REWARDS)
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=rewards,
        response_mask=response_mask,
        index=np.repeat(np.arange(rows // SAMPLES_PER_TASK), SAMPLES_PER_TASK),
    )
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "prompts": input_ids[:, :prompt_width],
        "responses": input_ids[:, prompt_width:],
        "response_mask": response_mask,
        "advantages": advantages,
    }


def as_verl_input(batch: dict[str, torch.Tensor], **meta):
    """`batch` in the no-padding TensorDict form verl's trainer sends its workers."""
    data = TensorDict(
        {key: value.clone() for key, value in batch.items()}, batch_size=len(batch["input_ids"])
    )
    data = left_right_2_no_padding(data)
    tu.assign_non_tensor(data, temperature=TEMPERATURE, **meta)
    return data


def log_probs(group, batch) -> torch.Tensor:
    """The group's per-token log-probs of the replies, padded like ``batch["responses"]``."""
    data = as_verl_input(batch, compute_loss=False, calculate_entropy=False)
    output = group.infer_batch(data).get()
    return no_padding_2_padding(tu.get(output, "log_probs"), data).float()


def train_one_step(group, batch, actor) -> dict:
    """The update as verl's trainer asks for it (``RayPPOTrainer._update_actor``): here one
    mini-batch, the whole batch, so one optimizer step."""
    mini_batch = actor.ppo_mini_batch_size * actor.rollout_n
    assert mini_batch == len(batch["input_ids"]), (mini_batch, len(batch["input_ids"]))
    data = as_verl_input(
        batch,
        calculate_entropy=False,
        global_batch_size=mini_batch,
        mini_batch_size=mini_batch,
        epochs=actor.ppo_epochs,
        seed=actor.data_loader_seed,
        dataloader_kwargs={"shuffle": actor.shuffle},
        compute_loss=True,
    )
    return tu.get(group.train_mini_batch(data).get(), "metrics")


def update(group, batch, actor, loss_fn) -> dict:
    """What one step with `loss_fn` did: its metrics, the weights before it and their change."""
    group.set_loss_fn(loss_fn)
    before = group.full_weights()[0]
    metrics = train_one_step(group, batch, actor)
    after = group.full_weights()[0]
    return {
        "grad_norm": metrics["grad_norm"][0],
        "pg_loss": float(metrics["actor/pg_loss"][0]),
        "lr": metrics["lr"][0],
        "before": before,
        "delta": {name: after[name] - before[name] for name in before},
    }


def per_rank_mean_ppo_loss(config, model_output, data, dp_group=None, tokens_per_rank=()):
    """``ppo_loss`` normalised by each rank's own loss tokens instead of the whole batch's.

    The averaged gradient is then the mean of the ranks' token means: the error verl's global
    token count exists to prevent, kept here to show the comparison would catch it.
    """
    rank = torch.distributed.get_rank(dp_group)
    # ppo_loss divides by batch_num_tokens and multiplies by dp_size.
    tu.assign_non_tensor(data, batch_num_tokens=tokens_per_rank[rank] * data["dp_size"])
    return ppo_loss(config, model_output, data, dp_group)


def tokens_per_rank(batch: dict[str, torch.Tensor], ranks: int) -> list[int]:
    """The loss tokens of each rank's share: verl dispatches contiguous slices of the batch."""
    return [int(share.sum()) for share in batch["response_mask"].chunk(ranks)]


def compare_updates(model_path: str) -> dict:
    """Both groups from the same weights, one step on the same batch: what each computed; then
    the 2-process group again from the same weights with :func:`per_rank_mean_ppo_loss`."""
    actor, config = training_config(model_path)
    groups = {processes: worker_group(config, processes) for processes in (1, 2)}
    # Both groups build their models at once: their start-up overlaps.
    ray.get([ref for group in groups.values() for ref in group.execute_all_async("reset")])
    batch = padded_batch(actor.model_config.hf_config.vocab_size)
    shares = tokens_per_rank(batch, 2)
    report: dict = {"tokens_per_rank": shares}
    report["log_probs"] = {
        processes: log_probs(group, batch) for processes, group in groups.items()
    }
    # On-policy, as the trainer's old log-probs are: the ratio is 1 at the start of the step.
    batch["old_log_probs"] = report["log_probs"][1]
    loss_fn = partial(ppo_loss, config=actor)
    report["updates"] = {
        processes: update(group, batch, actor, loss_fn) for processes, group in groups.items()
    }
    groups[2].reset()  # the model's initial weights again, and a fresh optimizer
    wrong_loss_fn = partial(per_rank_mean_ppo_loss, config=actor, tokens_per_rank=shares)
    report["per_rank_mean"] = update(groups[2], batch, actor, wrong_loss_fn)
    return report
