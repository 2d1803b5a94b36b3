"""Tree-structured GRPO (rollout.tree): branches of one snapshot are one group, only their own
continuations are trained, advantages are centred within each branch group; refusals."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from rllm_agents.episodes.replay import replay_episodes
from rllm_train import algorithms
from rllm_train.cli import main
from rllm_train.config import ConfigError, build_config
from rllm_train.native.batch import episodes_to_sequences
from rllm_train.native.trainer import NativeTrainer
from rllm_train.native.tree import check_tree_env

from tests.envs import uncopyable_env
from tests.train import reply_length
from tests.train.conftest import run_overrides

TREE = {"rollout.tree.enabled": True, "rollout.max_turns": 2, "rollout.tree.branch_turns": [1, 0]}


def test_branches_continue_one_snapshot_and_are_trained_as_its_group(tmp_path, tiny_model):
    # FrozenLake rewarded by reply length: the tiny model's replies are never moves, so every
    # trunk reaches its branch turn, and the branches of a group differ in reward.
    config = build_config(
        overrides=run_overrides(
            tmp_path / "run",
            tiny_model,
            **{"env.id": reply_length.LAKE_MODULE_ENV_ID, "trainer.steps": 1, **TREE},
        )
    )
    trainer = NativeTrainer(config)
    batches = []
    update = trainer.update
    trainer.update = lambda batch: batches.append(batch) or update(batch)
    [row] = trainer.train()
    episodes = trainer.last_episodes
    assert row["episodes"] == 4 and row["sequences_trained"] == 4

    groups = defaultdict(list)
    for episode in episodes:
        groups[episode.info["tree"]["group"]].append(episode)
    # Task 1 branches after turn 1, task 2 from its reset (branch turn 0): two groups of n.
    starts = {group: members[0].info["tree"]["start_turn"] for group, members in groups.items()}
    assert sorted(starts.values()) == [0, 1]
    assert [len(members) for members in groups.values()] == [2, 2]

    for group, members in groups.items():
        # One start state, one conversation so far: the group's first prompt is shared (after
        # a branch point, the trunk's first turn included).
        [prompt] = {tuple(e.trajectories[0].prompt_ids) for e in members}
        if starts[group] == 1:
            [trunk_action] = {e.env.transitions[0].action for e in members}
            assert trunk_action in trainer.tokenizer.decode(list(prompt))
        for episode in members:
            steps = episode.trajectories[0].steps  # its own turns: 1 after the branch, else 2
            assert len(steps) == 2 - starts[group]
            [sequence] = episodes_to_sequences([episode], ["g"], "trajectory")
            trained = [t for t, m in zip(sequence.token_ids, sequence.loss_mask, strict=True) if m]
            assert trained == [t for step in steps for t in step.response_ids]  # prefix: context
            earned = sum(len(step.action) / 50 for step in steps)  # after the branch point
            assert episode.trajectories[0].reward == pytest.approx(earned)
    # The env state came from the snapshot: each branch's record (trunk turn, then its own)
    # replays from a plain reset with no difference.
    assert all(replay.identical for replay in replay_episodes(episodes))

    [batch] = batches
    role = episodes[0].trajectories[0].name  # batch groups are per task group and role
    assert sorted(set(batch.groups)) == sorted(f"{group}/{role}" for group in groups)
    advantages, _ = algorithms.compute_advantages(
        trainer.settings, batch.rewards, batch.loss_mask, batch.groups
    )
    per_row = (advantages * batch.loss_mask).sum(1) / batch.loss_mask.sum(1)
    for group in set(batch.groups):
        rows = torch.tensor([g == group for g in batch.groups])
        assert per_row[rows].sum().item() == pytest.approx(0.0, abs=1e-5)
    assert per_row.abs().sum() > 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trainer.backend": "verl"}, "verl backend"),
        ({"rollout.mode": "async"}, "rollout.mode=sync"),
        ({"rollout.engine": "llamacpp"}, "rollout.engine=local"),
        ({"program.function": "my_agent:run"}, "agent program"),
        ({"algorithm.name": "ppo"}, "grpo or rloo"),
        ({"rollout.max_turns": 1}, "multi-turn"),
        ({"rollout.tree.branch_turns": [2]}, "rollout.tree.branch_turns"),
    ],
    ids=["verl", "async", "llamacpp", "program", "ppo", "single-turn", "turn-past-the-end"],
)
def test_settings_tree_rollouts_cannot_use_are_refused(changes, message):
    with pytest.raises(ConfigError, match=message):
        build_config(overrides={"env.id": "rllm/FrozenLake-v0", **TREE, **changes})


def test_envs_that_cannot_be_snapshotted_are_refused_before_the_run_folder(tmp_path, capsys):
    output = tmp_path / "run"
    inner = uncopyable_env.MODULE_ENV_ID
    code = main(
        ["--env", "rllm/GymText-v0", f"env.kwargs.env_id={inner}", f"trainer.output={output}"]
        + [f"{key}={value}" for key, value in TREE.items()]
    )
    assert code == 2 and not output.exists()
    assert "rollout.tree.enabled" in capsys.readouterr().err
    multiagent = build_config(overrides={"env.id": "kuhn_poker_v0", **TREE})
    with pytest.raises(ConfigError, match="rollout.tree.enabled: kuhn_poker_v0 is a multi-agent"):
        check_tree_env(multiagent)
    gymtext = build_config(
        overrides={"env.id": "rllm/GymText-v0", "env.kwargs": {"env_id": inner}, **TREE}
    )
    with pytest.raises(ConfigError, match=r"rollout.tree.enabled: .*cannot be copied.*socket"):
        check_tree_env(gymtext)
