"""One config, one seed, the same run on both backends.

``AgentTrainer`` with an agent class that takes arguments, a system prompt and GRPO's groups, on
the native backend and on verl:

* the first step's prompts are the same token ids (system prompt and agent arguments
  included);
* the tasks come in the same order, with the same env seeds, step after step;
* the same rewards give the same advantages.

The native side is the native trainer's own first step. The verl side is what verl's trainer
builds from the rows the verl backend writes - without Ray or a GPU: verl's dataset and data
loader from the composed config, then verl's ``AgentLoopWorker`` running our agent loop (the
code verl's workers run) against the same tiny model behind a local engine, and verl's own
``compute_advantage`` on the batch it returns.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import torch
from rllm_agents.agents.text_agent import TextAgent
from rllm_train import AgentTrainer, algorithms
from rllm_train.native.batch import episodes_to_sequences, to_tensors
from rllm_train.native.trainer import NativeTrainer

from tests.parts import require_module
from tests.train.conftest import run_overrides
from tests.train.test_verl_agent_loop import training_batches

pytestmark = pytest.mark.slow  # the tiny model plays a step on each backend

SYSTEM_PROMPT = "You add numbers. Reply with the sum alone."
TAG = "parity-check"
STEPS, TASKS, SAMPLES = 3, 2, 2


class TaggedAgent(TextAgent):
    """A TextAgent made with an argument of its own: `tag` starts every observation it shows
    the model, so a backend that drops the arguments shows a different prompt."""

    def __init__(self, tag: str, **kwargs) -> None:
        self.tag = tag
        super().__init__(**kwargs)

    def format_observation(self, observation, info) -> str:
        return f"[{self.tag}] {super().format_observation(observation, info)}"


def trainer_for(backend: str, output, model: str) -> AgentTrainer:
    overrides = run_overrides(
        output,
        model,
        **{
            "trainer.backend": backend,
            "trainer.steps": STEPS,
            "rollout.tasks_per_step": TASKS,
            "rollout.n": SAMPLES,
            "env.system_prompt": SYSTEM_PROMPT,
            "trainer.seed": 7,
            "trainer.micro_batch_size": 2,
            # verl's own knobs, for the composed config only (nothing is launched)
            "verl.n_gpus_per_node": 1,
            "verl.agent_workers": 1,
        },
    )
    return AgentTrainer(agent_class=TaggedAgent, agent_args={"tag": TAG}, config=overrides)


@pytest.fixture(scope="module")
def native_step(tmp_path_factory, tiny_model):
    """The native trainer's first step: its plan for every step, and step 1's episodes."""
    agent_trainer = trainer_for("native", tmp_path_factory.mktemp("native"), tiny_model)
    trainer = NativeTrainer(agent_trainer.config, setup=agent_trainer.setup())
    try:
        plans = [trainer.curriculum.plan(step) for step in range(STEPS)]  # one entry a task
        played = trainer._episodes_of(0)
        return trainer.tokenizer, plans, played, trainer.pad_id
    finally:
        trainer.close()


@pytest.fixture(scope="module")
def verl_step(tmp_path_factory, tiny_model):
    """What verl's trainer builds from the verl backend's rows: every step's batch, and the
    first one played by verl's AgentLoopWorker with our agent loop."""
    require_module("verl", "the verl backend needs rllm-train[verl]")
    from omegaconf import OmegaConf
    from rllm_agents.engines.local import LocalEngine
    from rllm_agents.models import load_model, load_tokenizer
    from rllm_train.verl.engine_server import EngineServerClient
    from rllm_train.verl.from_config import spec_from_config
    from rllm_train.verl.launch import prepare_run, write_run_files
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    agent_trainer = trainer_for("verl", tmp_path_factory.mktemp("verl"), tiny_model)
    spec = spec_from_config(agent_trainer.config, agent_trainer.setup())
    prepared = prepare_run(spec)
    write_run_files(prepared)
    config = prepared.config
    OmegaConf.resolve(config)
    tokenizer = load_tokenizer(tiny_model)
    batches = training_batches(config, tokenizer)
    first = batches[0]
    # As verl's trainer does: one uid per task row, then its samples side by side.
    first.non_tensor_batch["uid"] = np.array([f"task-{i}" for i in range(len(first))], dtype=object)
    repeated = first.repeat(repeat_times=config.actor_rollout_ref.rollout.n, interleave=True)
    engine = LocalEngine(load_model(tiny_model), tokenizer, max_batch_size=TASKS * SAMPLES)
    worker = AgentLoopWorker(config, EngineServerClient(engine))
    try:
        output = asyncio.run(worker.generate_sequences(repeated))
    finally:
        asyncio.run(engine.aclose())
    return batches, repeated.union(output), config


def verl_tasks(batch) -> list[tuple[int, dict | None]]:
    columns = batch.non_tensor_batch
    return [
        (int(seed), json.loads(task) if task else None)
        for seed, task in zip(columns["rllm_seed"], columns["rllm_task"], strict=True)
    ]


def test_the_steps_play_the_same_tasks_in_the_same_order(native_step, verl_step):
    _, plans, _, _ = native_step
    batches, _, _ = verl_step
    assert len(batches) == STEPS
    for step, (plan, batch) in enumerate(zip(plans, batches, strict=True)):
        native = [(seed, dict(row)) for seed, row in zip(plan.seeds, plan.rows, strict=True)]
        assert verl_tasks(batch) == native, f"step {step + 1}"
    assert all(task is not None for batch in batches for _, task in verl_tasks(batch))


def test_the_first_prompts_are_the_same_tokens(native_step, verl_step):
    tokenizer, _, played, _ = native_step
    _, batch, config = verl_step
    native_prompts = [list(e.trajectories[0].steps[0].prompt_ids) for e in played.episodes]
    width = config.data.max_prompt_length
    attention = batch.batch["attention_mask"][:, :width].bool()
    verl_prompts = [
        batch.batch["prompts"][row][attention[row]].tolist() for row in range(len(batch))
    ]
    assert len(native_prompts) == len(verl_prompts) == TASKS * SAMPLES
    assert native_prompts == verl_prompts
    text = tokenizer.decode(native_prompts[0])
    assert SYSTEM_PROMPT in text and f"[{TAG}]" in text  # the system prompt, the agent's argument


# Estimators whose advantage is one value per sequence: equal for equal rewards whatever the
# two backends sampled (REINFORCE++ whitens over tokens, so its values also depend on the
# lengths sampled; test_verl_agent_loop checks it on one batch).
@pytest.mark.parametrize("algorithm", ["grpo", "rloo"])
def test_the_same_rewards_give_the_same_advantages(native_step, verl_step, algorithm):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    _, _, played, pad_id = native_step
    _, batch, config = verl_step
    rewards = torch.tensor([1.0, 0.0, 0.25, 0.25])  # one group that differs, one that does not
    # Native: the step's sequences and groups, as the trainer builds them.
    sequences = episodes_to_sequences(played.episodes, played.groups, "trajectory")
    native_batch = to_tensors(sequences, pad_id)
    native, _ = algorithms.compute_advantages(
        algorithms.AlgorithmSettings(name=algorithm),
        rewards,
        native_batch.loss_mask,
        native_batch.groups,
    )
    # verl: the rewards on each response's last token, verl's estimator over verl's uids.
    mask = batch.batch["response_mask"]
    width = config.data.max_prompt_length
    last = batch.batch["attention_mask"][:, width:].sum(dim=1).long() - 1
    token_rewards = torch.zeros_like(mask, dtype=torch.float32)
    token_rewards[torch.arange(len(rewards)), last] = rewards
    batch.batch["token_level_rewards"] = token_rewards
    batch = compute_advantage(
        batch, adv_estimator=algorithm, num_repeat=SAMPLES, config=config.algorithm
    )
    verl_advantages = batch.batch["advantages"]
    for row in range(len(rewards)):
        native_row = native[row][native_batch.loss_mask[row] > 0]
        verl_row = verl_advantages[row][mask[row] > 0]
        assert native_row.numel() > 0 and verl_row.numel() > 0
        assert torch.allclose(native_row, native_row[0].expand_as(native_row))
        assert torch.allclose(verl_row, verl_row[0].expand_as(verl_row))
        assert native_row[0].item() == pytest.approx(verl_row[0].item(), abs=1e-5), row
