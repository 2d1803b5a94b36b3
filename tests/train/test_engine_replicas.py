"""More than one rollout replica (``rollout.engine_replicas``, rllm_train.native.replicas).

Two real LocalEngine copies of the tiny model behind the router: requests spread over both, a
conversation's later turns follow its first, a weight push reaches both (same version, same
log-probs) and one that fails is raised, not half done. Then a native run on two process
engines: every step's requests are shared by both replicas, both hold the version the trainer
pushed, and no engine process outlives the run. Last, the settings that cannot have replicas
are refused by name.
"""

from __future__ import annotations

import asyncio
import copy
import math

import psutil
import pytest
import torch
from rllm_agents.engines.base import EngineError, SamplingParams
from rllm_agents.models import load_model, load_tokenizer
from rllm_train.cli import main
from rllm_train.config import ConfigError, build_config
from rllm_train.native.engine_apart import EngineShare, local_copy_engine, snapshot_weights
from rllm_train.native.replicas import (
    REQUESTS_METRIC,
    VERSION_METRIC,
    ConversationAffinity,
    ReplicaPushFailed,
    least_loaded,
    replica_set,
)
from rllm_train.native.trainer import NativeTrainer

from tests.train import reply_length
from tests.train.conftest import run_overrides

pytestmark = pytest.mark.slow

SAMPLING = SamplingParams(temperature=1.0, max_tokens=4, seed=7)
PROCESS_CHILD = "rllm_agents.engines.process.child"


# ---- the pure parts ------------------------------------------------------------------------------
def test_ties_are_taken_in_turn_and_the_least_loaded_wins():
    assert least_loaded([0, 0], 0) == 0 and least_loaded([0, 0], 1) == 1
    assert least_loaded([2, 1, 1], 0) == 1 and least_loaded([2, 1, 1], 2) == 2
    assert least_loaded([0, 3], 1) == 0


def test_affinity_finds_the_longest_prefix_once_and_forgets_the_oldest():
    affinity = ConversationAffinity(capacity=2)
    affinity.remember([1, 2, 3], 1)
    affinity.remember([1, 2], 0)
    assert affinity.claim([1, 2, 3, 9]) == 1  # the longer prefix is the conversation
    assert affinity.claim([1, 2, 3, 9]) == 0  # claimed once: [1, 2] is what is left
    assert affinity.claim([5]) is None and len(affinity) == 0
    for replica, tokens in enumerate(([7], [8], [9])):
        affinity.remember(tokens, replica)
    assert len(affinity) == 2 and affinity.claim([7, 1]) is None  # the oldest was dropped


def test_a_replica_takes_its_share_of_threads_and_cores():
    assert [EngineShare(i, 2).part(5) for i in range(2)] == [2, 2]
    assert EngineShare(1, 4).part(2) == 1  # never none
    cores = (4, 5, 6, 7)
    assert [EngineShare(i, 2).slice(cores) for i in range(2)] == [(4, 5), (6, 7)]
    assert [EngineShare(i, 3).slice((0, 1)) for i in range(3)] == [(0,), (1,), (0,)]


# ---- two real LocalEngines behind the router ------------------------------------------------------
@pytest.fixture(scope="module")
def policy(tiny_model):
    return load_model(tiny_model).eval(), load_tokenizer(tiny_model)


@pytest.fixture
def two_copies(policy):
    model, tokenizer = policy
    aparts = [local_copy_engine(model, tokenizer, version=0, max_batch_size=8) for _ in range(2)]
    apart = replica_set(aparts)
    yield apart
    apart.engine.close()


def prompts(tokenizer, count: int) -> list[list[int]]:
    return [tokenizer.encode(f"Question {i}: what is {i} plus {i}?") for i in range(count)]


def test_concurrent_requests_and_lockstep_rounds_are_spread_over_both(two_copies, policy):
    router = two_copies.engine
    ids = prompts(policy[1], 8)

    async def concurrent():
        return await asyncio.gather(
            *(router.generate(prompt_ids=p, sampling=SAMPLING) for p in ids)
        )

    answers = asyncio.run(concurrent())
    assert all(answer.completion_ids for answer in answers)
    assert router.step_metrics() == {
        f"{REQUESTS_METRIC}0": 4, f"{REQUESTS_METRIC}1": 4,
        f"{VERSION_METRIC}0": 0, f"{VERSION_METRIC}1": 0,
    }  # fmt: skip
    calls = [{"prompt_ids": p, "sampling": SAMPLING} for p in ids[:6]]
    round_answers = asyncio.run(router.generate_together(calls))
    assert [a.prompt_ids for a in round_answers] == ids[:6]  # in the calls' order
    metrics = router.step_metrics()
    assert (metrics[f"{REQUESTS_METRIC}0"], metrics[f"{REQUESTS_METRIC}1"]) == (3, 3)
    assert router.stats.busy_seconds > 0


def test_a_conversations_next_turn_goes_where_its_first_was_served(two_copies, policy):
    router = two_copies.engine
    first_a, first_b = prompts(policy[1], 2)

    def served_by(prompt_ids) -> tuple[object, int]:
        answer = asyncio.run(router.generate(prompt_ids=prompt_ids, sampling=SAMPLING))
        metrics = router.step_metrics()
        [replica] = [k for k in range(2) if metrics[f"{REQUESTS_METRIC}{k}"]]
        return answer, replica

    answer_a, replica_a = served_by(first_a)
    answer_b, replica_b = served_by(first_b)
    assert {replica_a, replica_b} == {0, 1}  # idle replicas: taken in turn
    # B's next turn first: round robin alone would send it to replica_a.
    next_b = answer_b.prompt_ids + answer_b.completion_ids + policy[1].encode(" And then?")
    next_a = answer_a.prompt_ids + answer_a.completion_ids + policy[1].encode(" And then?")
    assert served_by(next_b)[1] == replica_b
    assert served_by(next_a)[1] == replica_a


def test_a_push_reaches_both_and_they_then_sample_the_same(two_copies, policy):
    router = two_copies.engine
    [prompt] = prompts(policy[1], 1)

    async def on_each():
        return await asyncio.gather(
            *(engine.generate(prompt_ids=prompt, sampling=SAMPLING) for engine in router.engines)
        )

    before, _ = asyncio.run(on_each())
    changed = copy.deepcopy(policy[0])
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    two_copies.push(snapshot_weights(changed, 3))
    assert router.versions == [3, 3] and router.policy_version == 3 and two_copies.version == 3
    first, second = asyncio.run(on_each())
    assert first.logprobs != pytest.approx(before.logprobs, abs=1e-3)  # new weights serve
    assert first.completion_ids == second.completion_ids
    assert first.logprobs == pytest.approx(second.logprobs, abs=1e-5)
    assert first.policy_version == second.policy_version == 3


def test_a_push_one_replica_refuses_is_raised_and_the_oldest_version_is_reported(policy):
    model, tokenizer = policy
    aparts = [local_copy_engine(model, tokenizer, version=0, max_batch_size=4) for _ in range(2)]
    # Replica 1 serves another architecture (a wider final norm): the snapshot cannot load.
    served = aparts[1].engine.model
    served.model.norm.weight = torch.nn.Parameter(torch.ones(served.config.hidden_size + 1))
    apart = replica_set(aparts)
    try:
        with pytest.raises(ReplicaPushFailed, match="replica 1 of 2 .* version 2"):
            apart.push(snapshot_weights(model, 2))
        assert apart.engine.versions == [2, 0]
        assert apart.version == 0  # what the player waits on: not every replica has 2
    finally:
        asyncio.run(apart.engine.aclose())
    with pytest.raises(EngineError, match="closed"):
        asyncio.run(aparts[0].engine.generate(prompt_ids=[1, 2], sampling=SAMPLING))


# ---- a native run on two process engines ------------------------------------------------------------
def engine_children() -> list[psutil.Process]:
    """This process's engine processes now."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if PROCESS_CHILD in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


class CountingTrainer(NativeTrainer):
    """A real trainer that notes each step's model turns and the engine processes running."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.turns: list[int] = []
        self.children: set[int] = set()

    def train_step(self, step: int):
        row = super().train_step(step)
        self.turns.append(sum(len(t.steps) for e in self.last_episodes for t in e.trajectories))
        self.children.update(child.pid for child in engine_children())
        return row


# Envs rewarded by the reply's length: the samples of a task differ in reward, so every update
# moves the weights the replicas are sent. Async plays two turns on a lake (a conversation's
# second turn follows its first to its replica), sync one addition (the cheaper run).
@pytest.mark.parametrize(
    ("mode", "lag", "env_id", "turns", "steps"),
    [
        ("async", 1, reply_length.LAKE_MODULE_ENV_ID, 2, 3),
        ("sync", 0, reply_length.MODULE_ENV_ID, 1, 2),
    ],
    ids=["async", "sync"],
)
def test_a_run_on_two_process_replicas_shares_each_step_and_syncs_both(
    tmp_path, tiny_model, mode, lag, env_id, turns, steps
):
    config = build_config(
        overrides=run_overrides(
            tmp_path / "run",
            tiny_model,
            **{
                "env.id": env_id,
                "rollout.max_turns": turns,
                "rollout.temperature": 2.0,
                "rollout.mode": mode,
                "rollout.engine": "process",
                "rollout.engine_replicas": 2,
                "trainer.steps": steps,
            },
        )
    )
    trainer = CountingTrainer(config)
    rows = trainer.train()

    assert [row["step"] for row in rows] == list(range(1, steps + 1))
    for row, turns in zip(rows, trainer.turns, strict=True):
        served = [row[f"{REQUESTS_METRIC}{k}"] for k in range(2)]
        assert all(count > 0 for count in served), row  # both replicas played
        assert sum(served) == turns >= row["episodes"]  # every model turn, once
        # Both hold the version the step was pinned to: in async mode (max_staleness 1) one
        # update behind the trainer, in sync mode the trainer's own (step N played by N - 1).
        assert row["async/version"] == max(row["step"] - 1 - lag, 0)
        assert [row[f"{VERSION_METRIC}{k}"] for k in range(2)] == [row["async/version"]] * 2
        assert math.isfinite(row["loss"]) and row["grad_norm"] > 0
    # Both replicas play the weights they are meant to: the trained ones in sync mode (the
    # engines' log-probs are the trainer's), one update behind in async mode.
    gaps = [row["rollout_corr/logprob_gap_mean"] for row in rows]
    assert gaps[0] < 1e-4
    assert all((gap < 1e-4) if lag == 0 else (gap > 1e-4) for gap in gaps[1:]), gaps
    assert len(trainer.children) == 2  # one engine process per replica
    assert not [pid for pid in trainer.children if psutil.pid_exists(pid)]
    assert not engine_children()


# ---- what cannot have replicas -------------------------------------------------------------------
def test_replicas_without_an_engine_apart_are_refused(capsys, tmp_path, tiny_model):
    with pytest.raises(ConfigError, match=r"rollout\.engine_replicas: .* at least 1, got 0"):
        build_config(overrides={"rollout.engine_replicas": 0})
    with pytest.raises(ConfigError, match=r"engine_replicas=2: .*rollout\.engine=local in "):
        build_config(overrides={"rollout.engine_replicas": 2, "rollout.engine": "local"})
    with pytest.raises(ConfigError, match=r"rollout\.engine_replicas: .* verl backend"):
        build_config(overrides={"rollout.engine_replicas": 2, "trainer.backend": "verl"})
    # auto is settled once the run is set up: the tiny model is played by itself (no GGUF).
    argv = ["--dry-run", "--model", tiny_model, "--output", str(tmp_path / "run")]
    assert main([*argv, "rollout.engine_replicas=2"]) == 2
    assert "rollout.engine=auto became local" in capsys.readouterr().err
    assert main([*argv, "rollout.engine_replicas=2", "rollout.mode=async"]) == 0
