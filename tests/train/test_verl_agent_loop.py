"""`RllmAgentLoop` inside verl's own `AgentLoopWorker`, with a real token-in/token-out engine.

The local transformers engine (``tiny`` model) stands in for verl's rollout servers behind
:class:`EngineServerClient`; everything else is verl's code: the worker instantiates our loop
from the registration file, pads and masks its outputs, places the reward, and the trainer's
own ``compute_advantage`` runs on the resulting batch.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.tasks import TaskSet
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_train.verl.engine_server import EngineServerClient
from rllm_train.verl.launch import prepare_run, write_run_files
from rllm_train.verl.spec import VerlRunSpec

from tests.parts import require_part

pytestmark = pytest.mark.slow  # a real model generates every episode

COUNTING_ID = "rllm-test/Counting-v0"
PROMPT_LENGTH, RESPONSE_LENGTH, TURN_TOKENS = 384, 160, 8


class CountingEnv(TextEnv):
    """Ends on turn ``target``; each turn pays 0.25, the last one 1.0 (a known, non-zero reward)."""

    def __init__(self, **kwargs):
        rows = ({"task_id": "one", "target": 1}, {"task_id": "two", "target": 2})
        super().__init__(TaskSet("counting", rows), **kwargs)

    def begin(self, task):
        return f"Say anything. This episode lasts {task['target']} turn(s).", {}

    def act(self, action):
        done = self.turn >= self.task["target"]
        reward = 1.0 if done else 0.25
        return Transition(f"Turn {self.turn} heard. Say more.", reward=reward, terminated=done)


def counting_reward(target: int) -> float:
    return 1.0 + 0.25 * (target - 1)


class SandboxDiesEnv(TextEnv):
    """Its (pretend) sandbox dies on the first action: an infrastructure failure, not the agent's."""

    def __init__(self, **kwargs):
        super().__init__(TaskSet("dies", ({"task_id": "dies"},)), **kwargs)

    def begin(self, task):
        return "Say anything.", {}

    def act(self, action):
        raise InfrastructureFailure("sandbox_died", "the sandbox process exited")


class HangsEnv(SandboxDiesEnv):
    """Its step hangs far longer than the episode may last."""

    def act(self, action):
        time.sleep(HANG_SECONDS)
        return Transition("too late", reward=1.0, terminated=True)


FAILING_ID, HANGING_ID, HANG_SECONDS = "rllm-test/SandboxDies-v0", "rllm-test/Hangs-v0", 8.0
for env_id, env_class in (
    (COUNTING_ID, CountingEnv),
    (FAILING_ID, SandboxDiesEnv),
    (HANGING_ID, HangsEnv),
):
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=env_class)


class RecordingClient(EngineServerClient):
    """The real engine, with every completion kept so tests can find it in verl's batch."""

    def __init__(self, engine, **kwargs):
        super().__init__(engine, **kwargs)
        self.completions: dict[str, list] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        output = await super().generate(
            request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs
        )
        self.completions.setdefault(request_id, []).append(
            (list(prompt_ids), output.token_ids, output.log_probs, sampling_params["max_tokens"])
        )
        return output


@dataclass(frozen=True)
class Rollout:
    output: Any  # verl's DataProto from the worker
    repeated: Any  # the input batch, repeated n times as verl's trainer does
    client: RecordingClient
    tokenizer: Any
    config: Any  # the composed verl config
    seconds: float  # wall-clock time of the worker's generate_sequences


def _agents_ready() -> bool:
    return all(
        importlib.util.find_spec(name) is not None
        for name in (
            "rllm_agents.models",
            "rllm_agents.engines.local",
            "rllm_agents.agents.registry",
        )
    )


def training_batches(config, tokenizer) -> list:
    """Every training batch (a DataProto) as verl's trainer loads them from the composed
    config: its dataset over the rows the backend wrote, its sampler, its batch size."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.protocol import DataProto
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    loader = StatefulDataLoader(
        dataset,
        batch_size=config.data.train_batch_size,
        collate_fn=collate_fn,
        sampler=create_rl_sampler(config.data, dataset),
        drop_last=True,
    )
    return [DataProto.from_single_dict(batch) for batch in loader]


def run_worker(
    request, output_dir, env_id: str, tasks: int, samples: int, algorithm: str, **changes
) -> Rollout:
    """`tasks` x `samples` episodes of `env_id` through verl's AgentLoopWorker."""
    require_part(_agents_ready(), "rllm_agents models/local engine/agent registry not importable")
    model_path = request.getfixturevalue("tiny_model")  # the trainer tests' shared tiny model
    from omegaconf import OmegaConf
    from rllm_agents.engines.local import LocalEngine
    from rllm_agents.models import load_model, load_tokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    spec = VerlRunSpec(
        env_id=env_id,
        model_path=str(model_path),
        output_dir=str(output_dir),
        algorithm=algorithm,
        train_batch_size=tasks,
        n_samples=samples,
        max_turns=4,
        max_tokens_per_turn=TURN_TOKENS,
        max_prompt_tokens=PROMPT_LENGTH,
        max_response_tokens=RESPONSE_LENGTH,
        n_gpus_per_node=1,
        micro_batch_size_per_gpu=1,
        agent_workers=1,
        temperature=1.0,
        **changes,
    )
    prepared = prepare_run(spec)
    files = write_run_files(prepared)
    config = prepared.config
    OmegaConf.resolve(config)
    tokenizer = load_tokenizer(model_path)
    engine = LocalEngine(load_model(model_path), tokenizer, max_batch_size=4)
    client = RecordingClient(engine)
    worker = AgentLoopWorker(config, client)
    # The first training batch exactly as verl's trainer loads it from the composed config.
    batch = training_batches(config, tokenizer)[0]
    assert str(files.train_file) in list(config.data.train_files)
    batch.non_tensor_batch["uid"] = np.array([f"task-{i}" for i in range(tasks)], dtype=object)
    repeated = batch.repeat(repeat_times=samples, interleave=True)
    started = time.monotonic()
    try:
        output = asyncio.run(worker.generate_sequences(repeated))
        seconds = time.monotonic() - started
    finally:
        asyncio.run(engine.aclose())
    return Rollout(output, repeated, client, tokenizer, config, seconds)


@pytest.fixture(scope="module")
def rollout(request, tmp_path_factory):
    return run_worker(
        request, tmp_path_factory.mktemp("run"), COUNTING_ID, tasks=2, samples=2, algorithm="grpo"
    )


def _episodes(client):
    return list(client.completions.values())


def test_batch_has_verls_layout(rollout):
    output = rollout.output
    batch = output.batch
    assert batch["prompts"].shape == (4, PROMPT_LENGTH)
    assert batch["responses"].shape == (4, RESPONSE_LENGTH)
    assert batch["input_ids"].shape == (4, PROMPT_LENGTH + RESPONSE_LENGTH)
    assert torch.equal(batch["input_ids"], torch.cat([batch["prompts"], batch["responses"]], dim=1))
    prompt_attention = batch["attention_mask"][:, :PROMPT_LENGTH]
    response_attention = batch["attention_mask"][:, PROMPT_LENGTH:]
    # Prompts are left-padded, responses right-padded: ones are contiguous at the join.
    assert torch.all(prompt_attention[:, -1] == 1)
    assert torch.all(prompt_attention.diff(dim=1) >= 0)
    assert torch.all(response_attention.diff(dim=1) <= 0)
    # Loss only on real tokens.
    assert torch.all(batch["response_mask"] <= response_attention)


def test_model_tokens_are_masked_in_and_env_tokens_out(rollout):
    output, client, tokenizer = rollout.output, rollout.client, rollout.tokenizer
    episodes = _episodes(client)
    assert len(episodes) == 4
    batch = output.batch
    for row in range(4):
        mask = batch["response_mask"][row].bool()
        attention = batch["attention_mask"][row, PROMPT_LENGTH:].bool()
        generated = batch["responses"][row][mask].tolist()
        logprobs = batch["rollout_log_probs"][row][mask]
        # Each row is exactly one recorded episode: its completions, in order, are the 1-tokens.
        matches = [
            turns
            for turns in episodes
            if [token for _, ids, _, _ in turns for token in ids] == generated
        ]
        assert matches, f"row {row}: masked tokens are not one episode's completions"
        expected = torch.tensor([lp for _, _, lps, _ in matches[0] for lp in lps])
        assert torch.allclose(logprobs, expected)
        # Every later turn's prompt is exactly the whole sequence so far (token-in/token-out).
        prompt = batch["prompts"][row][batch["attention_mask"][row, :PROMPT_LENGTH].bool()].tolist()
        sequence = prompt + batch["responses"][row][attention].tolist()
        for prompt_ids, completion, _, max_tokens in matches[0]:
            assert sequence[: len(prompt_ids)] == prompt_ids
            assert sequence[len(prompt_ids) : len(prompt_ids) + len(completion)] == completion
            assert max_tokens <= TURN_TOKENS
        env_tokens = batch["responses"][row][attention & ~mask]
        if len(matches[0]) > 1:  # the env's reply sits between the turns, masked out
            assert "Turn 1 heard" in tokenizer.decode(env_tokens)
        else:
            assert len(env_tokens) == 0


def test_reward_sits_on_the_last_response_token(rollout):
    output, repeated = rollout.output, rollout.repeated
    batch = output.batch
    scores = batch["rm_scores"]
    last = batch["attention_mask"][:, PROMPT_LENGTH:].sum(dim=1) - 1
    targets = [json.loads(task)["target"] for task in repeated.non_tensor_batch["rllm_task"]]
    assert sorted(targets) == [1, 1, 2, 2]  # both tasks, each sampled twice
    # Budgets are generous: every episode runs to the env's end, over 1 or 2 turns.
    assert list(output.non_tensor_batch["rllm_termination"]) == ["env_done"] * 4
    assert list(output.non_tensor_batch["__num_turns__"]) == [2 * t + 1 for t in targets]
    for row, target in enumerate(targets):
        expected = counting_reward(target)
        assert scores[row, last[row]].item() == pytest.approx(expected)
        assert scores[row].abs().sum().item() == pytest.approx(abs(expected))
    assert list(output.non_tensor_batch["rllm_seed"]) == list(
        repeated.non_tensor_batch["rllm_seed"]
    )


def test_verls_trainer_computes_grpo_advantages_on_the_batch(rollout):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    output, repeated = rollout.output, rollout.repeated
    batch = repeated.union(output)
    batch.batch["token_level_scores"] = batch.batch["rm_scores"]
    batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
    batch = compute_advantage(batch, adv_estimator="grpo", num_repeat=2)
    advantages = batch.batch["advantages"]
    rewards = batch.batch["rm_scores"].sum(dim=1)
    mask = batch.batch["response_mask"].bool()
    for first in (0, 2):
        group = rewards[first : first + 2]
        expected = (group - group.mean()) / (group.std() + 1e-6)
        for offset in range(2):
            row = first + offset
            values = advantages[row][mask[row]]
            assert torch.allclose(values, expected[offset].expand_as(values), atol=1e-5)
            assert torch.all(advantages[row][~mask[row]] == 0)


@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "reinforce_plus_plus"])
def test_advantages_and_losses_match_the_native_backend_on_the_same_batch(rollout, algorithm):
    """verl's trainer path and the native adapters give identical numbers on one batch."""
    from rllm_train import algorithms
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.utils.config import omega_conf_to_dataclass

    batch = rollout.repeated.union(rollout.output)
    batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
    batch = compute_advantage(
        batch, adv_estimator=algorithm, num_repeat=2, config=rollout.config.algorithm
    )
    mask = batch.batch["response_mask"]
    settings = algorithms.AlgorithmSettings(name=algorithm)
    native_advantages, _ = algorithms.compute_advantages(
        settings, batch.batch["rm_scores"].sum(dim=1), mask, batch.non_tensor_batch["uid"]
    )
    assert torch.equal(native_advantages, batch.batch["advantages"])

    # The actor loss verl's workers compute from the composed actor config vs the native loss.
    old_log_prob = batch.batch["rollout_log_probs"]
    shift = torch.linspace(-0.3, 0.3, old_log_prob.shape[1]).expand_as(old_log_prob)
    log_prob = old_log_prob + shift
    actor_config = omega_conf_to_dataclass(rollout.config.actor_rollout_ref.actor)
    verl_loss, _ = get_policy_loss_fn(actor_config.policy_loss.loss_mode)(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=batch.batch["advantages"],
        response_mask=mask,
        loss_agg_mode=actor_config.loss_agg_mode,
        config=actor_config,
    )
    native_loss, _ = algorithms.policy_loss(
        settings, old_log_prob, log_prob, native_advantages, mask
    )
    assert torch.allclose(verl_loss, native_loss)
    if algorithm == "reinforce_plus_plus":  # batch-normalised: the two tasks' rewards differ
        assert verl_loss.item() != 0.0


def test_an_infrastructure_failure_trains_nothing_and_is_reported(request, tmp_path):
    rollout = run_worker(
        request, tmp_path, FAILING_ID, tasks=1, samples=1, algorithm="reinforce_plus_plus"
    )
    output = rollout.output
    assert list(output.non_tensor_batch["rllm_failure"]) == ["sandbox_died"]
    assert list(output.non_tensor_batch["rllm_termination"]) == ["env_failure"]
    # The model's tokens stay in the sequence, but no loss and no reward come from them.
    assert output.batch["attention_mask"][0, PROMPT_LENGTH:].sum() > 0
    assert output.batch["response_mask"].sum() == 0
    assert output.batch["rm_scores"].abs().sum() == 0
    # verl's trainer asks its agent-loop manager for this batch, which applies the run's
    # failure rule to it: a training step of failed episodes stops the run, validation not.
    from rllm_train.run.failures import TooManyFailedEpisodes
    from rllm_train.verl.failure_check import batch_failures, check_batch

    failures = batch_failures(output.non_tensor_batch)
    assert (failures.failed, failures.total, failures.kinds) == (1, 1, (("sandbox_died", 1),))
    with pytest.raises(TooManyFailedEpisodes, match=r"step 3: 1 of 1 episodes failed"):
        check_batch(output, {"global_steps": 3}, max_rate=0.5)
    check_batch(output, {"global_steps": 3, "validate": True}, max_rate=0.5)
    check_batch(output, {"global_steps": 3}, max_rate=1.0)


def test_an_episode_past_its_time_limit_ends_without_holding_the_batch(request, tmp_path):
    rollout = run_worker(
        request,
        tmp_path,
        HANGING_ID,
        tasks=1,
        samples=1,
        algorithm="reinforce_plus_plus",
        episode_timeout_s=1.0,
    )
    assert rollout.seconds < HANG_SECONDS / 2  # the batch did not wait for the env
    output = rollout.output
    assert list(output.non_tensor_batch["rllm_termination"]) == ["timeout"]
    assert list(output.non_tensor_batch["rllm_failure"]) == ["timeout"]
    assert output.batch["response_mask"].sum() == 0 and output.batch["rm_scores"].abs().sum() == 0
