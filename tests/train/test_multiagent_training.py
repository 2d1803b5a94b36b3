"""Multi-agent training in ``rllm-train`` (native): self-play, a fixed opponent, solver-judge.

The pure parts (role-conditioned baselines, seatings, which trajectories become sequences and
in which group) are checked by hand-computed values; short runs on the tiny model check the
whole path: the workflow engine's games, the trained seats only, frozen weights that stay
frozen, per-seat metrics, RAE's baselines through a resume, and the config errors.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from rllm_agents.types import Episode, Trajectory
from rllm_train import algorithms
from rllm_train.cli import main
from rllm_train.config import build_config
from rllm_train.native import checkpoint
from rllm_train.native.batch import (
    TrainSequence,
    episodes_to_sequences,
    to_tensors,
    trained_trajectories,
)
from rllm_train.native.multiagent_setup import seating_plans
from rllm_train.native.role_advantages import RoleBaselines, rae_advantages, role_key
from rllm_train.native.trainer import ROLE_BASELINES, NativeTrainer, informative_rows

from tests.parts import require_part
from tests.train.conftest import run_overrides
from tests.train.test_cli_errors import assert_main_fails

# ---- pure parts -------------------------------------------------------------------------------


def test_rae_subtracts_each_roles_baseline_before_taking_the_reward_in():
    advantages, baselines = rae_advantages(
        rewards=[1.0, -1.0, 1.0, 1.0],
        keys=["g:player_0", "g:player_1", "g:player_0", "g:player_1"],
        baselines={"g:player_1": 0.5},
        decay=0.9,
    )
    # player_0 starts at 0: 1 - 0, then its baseline is 0.1, so 1 - 0.1.
    # player_1 starts at 0.5: -1 - 0.5, then 0.9 * 0.5 - 0.1 = 0.35, so 1 - 0.35.
    assert advantages == pytest.approx([1.0, -1.5, 0.9, 0.65])
    assert baselines == pytest.approx({"g:player_0": 0.19, "g:player_1": 0.415})


def test_rae_baselines_move_on_and_work_with_one_sample_per_task():
    baselines = RoleBaselines(decay=0.5)
    assert baselines.advantages([2.0], ["g:judge"]) == [2.0]
    assert baselines.advantages([2.0], ["g:judge"]) == [1.0]  # baseline 0.5 * 2
    assert baselines.values == {"g:judge": 1.5}
    with pytest.raises(ValueError, match="decay"):
        rae_advantages([1.0], ["a"], {}, decay=1.0)


def seat(name: str, role: str, reward: float, trainable: bool = True) -> Trajectory:
    trajectory = Trajectory(name=name, reward=reward)
    trajectory.prompt_ids, trajectory.response_ids = [1, 2], [3, 4]
    trajectory.response_mask = [1, 1]
    trajectory.info.update(role=role, trainable=trainable)
    return trajectory


def test_only_trained_seats_become_sequences_grouped_by_task_and_role():
    episodes = [
        Episode(
            trajectories=[
                seat("solver_0", "solver", 1.0),
                seat("solver_1", "solver", 0.0),
                seat("judge_0", "judge", 1.0, trainable=False),  # a frozen judge
            ]
        )
        for _ in range(2)
    ]
    sequences = episodes_to_sequences(episodes, ["7", "7"], "trajectory")
    # Both solvers of both samples of task 7 share one group; the frozen judge is left out.
    assert [(s.group, s.reward) for s in sequences] == [("7/solver", 1.0), ("7/solver", 0.0)] * 2
    role_keys = [role_key("sj", t) for t, _ in trained_trajectories(episodes, ["7", "7"])]
    assert role_keys == ["sj:solver"] * 4


def test_per_trajectory_advantages_reach_every_model_token():
    episodes = [Episode(trajectories=[seat("speaker_0", "speaker", 1.0)])]
    sequences = episodes_to_sequences(episodes, ["1"], "trajectory", advantages=[0.25])
    batch = to_tensors(sequences, pad_id=0)
    advantages, returns = algorithms.given_advantages(batch.advantages, batch.loss_mask)
    assert advantages.tolist() == [[0.0, 0.0, 0.25, 0.25]]  # prompt tokens get nothing
    assert torch.equal(advantages, returns)
    with pytest.raises(ValueError, match="2 advantages for 1"):
        episodes_to_sequences(episodes, ["1"], "trajectory", advantages=[0.1, 0.2])


def test_rows_without_advantage_are_found_on_trained_tokens_only():
    advantages = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.3, 0.0, 0.0]])
    loss_mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    # Row 2's advantage sits on a prompt token only: it trains nothing.
    assert informative_rows(advantages, loss_mask) == [1]


def test_dropping_rows_without_advantage_gives_the_update_of_the_rows_that_have_one(
    tmp_path, tiny_model
):
    """Group a scored the same twice (no advantage), group b did not: the update with
    drop_zero_advantage on the whole batch equals the plain update on group b alone."""
    sequences = [
        TrainSequence([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], reward, group)
        for reward, group in ((1.0, "a"), (1.0, "a"), (1.0, "b"), (0.0, "b"))
    ]

    def updated(drop: bool, rows: list[int]) -> tuple[dict, dict]:
        overrides = run_overrides(tmp_path / f"run-{drop}", tiny_model)
        trainer = NativeTrainer(
            build_config(overrides={**overrides, "algorithm.drop_zero_advantage": drop})
        )
        metrics = trainer.update(to_tensors([sequences[i] for i in rows], pad_id=0))
        return metrics, weights(trainer.model)

    dropped, after_drop = updated(True, [0, 1, 2, 3])
    plain, after_plain = updated(False, [2, 3])
    assert dropped["sequences_trained"] == 2 and plain["sequences_trained"] == 2
    assert dropped["loss"] == pytest.approx(plain["loss"])
    for name, tensor in after_plain.items():
        torch.testing.assert_close(after_drop[name], tensor, msg=name)


def test_rotated_seatings_give_every_policy_every_seat():
    spec = {"player_0": "trained", "*": "random"}
    assert seating_plans(["player_0", "player_1"], spec, rotate=False) == [
        {"player_0": "trained", "player_1": "random"}
    ]
    assert seating_plans(["player_0", "player_1"], spec, rotate=True) == [
        {"player_0": "trained", "player_1": "random"},
        {"player_0": "random", "player_1": "trained"},
    ]


# ---- config errors: one line, exit status 2, before any model loads ----------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--env", "kuhn_poker_v0", "multiagent.seats.player_2=random"],
            ("multiagent.seats.player_2", "player_0, player_1"),
        ),
        (
            ["--env", "kuhn_poker_v0", "multiagent.seats.player_1=randm"],
            ("multiagent.seats.player_1", "'randm'", "trained, frozen", "random"),
        ),
        (
            ["--env", "kuhn_poker_v0", "multiagent.seats={player_0: random, player_1: first}"],
            ("multiagent.seats", "no seat is played by 'trained'"),
        ),
        (
            ["--env", "kuhn_poker_v0", "multiagent.seats.player_1=frozen:/no/such/run"],
            ("multiagent.seats.player_1", "no trainer checkpoint"),
        ),
        (
            ["--env", "rllm/FrozenLake-v0", "multiagent.seats.player_1=random"],
            ("multiagent", "Gymnasium env"),
        ),
        (["--env", "kuhn_pokr_v0"], ("env.id", "multi-agent envs: tictactoe_v0, kuhn_poker_v0")),
        (["--env", "kuhn_poker_v0", "env.kwargs.no_such_arg=1"], ("env.kwargs", "no_such_arg")),
        (["algorithm.rae_decay=1.5"], ("algorithm.rae_decay", "below 1")),
        (
            ["--algorithm", "ppo", "algorithm.drop_zero_advantage=true"],
            ("algorithm.drop_zero_advantage", "value head"),
        ),
    ],
)
def test_bad_multiagent_config_is_one_line(capsys, tmp_path, argv, expected):
    assert_main_fails(capsys, [*argv, "--model", "tiny", "--output", str(tmp_path)], *expected)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--env", "kuhn_poker_v0"], ("kuhn_poker_v0", "multi-agent", "--backend native")),
        (["--algorithm", "rae", "rollout.n=1"], ("rae", "per-role", "--backend native")),
    ],
)
def test_verl_backend_refuses_multiagent_training_with_the_reason(capsys, argv, expected):
    assert_main_fails(capsys, [*argv, "--backend", "verl", "--dry-run"], *expected)


def test_native_dry_run_accepts_a_multiagent_config(capsys):
    assert main(["--config", "referential-speaker", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "id: referential_v0" in printed and "listener_0: literal_listener" in printed


# ---- short runs on the tiny model ---------------------------------------------------------------


def multiagent_run(output, model: str, env_id: str, **changes) -> dict:
    return run_overrides(
        output,
        model,
        **{"env.id": env_id, "rollout.temperature": 2.0, "trainer.steps": 1, **changes},
    )


def read_rows(output) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_self_play_trains_every_seat_with_groups_per_task_and_role(tmp_path, tiny_model):
    """One shared policy on both seats of the referential game: both roles are trained."""
    config = build_config(
        overrides=multiagent_run(
            tmp_path / "run",
            tiny_model,
            "referential_v0",
            **{
                "env.kwargs": {"rounds": 1},
                "trainer.val_before_train": True,
                "algorithm.drop_zero_advantage": True,
            },
        )
    )
    trainer = NativeTrainer(config)
    start, row = trainer.train()
    episodes = trainer.last_episodes
    assert start["step"] == 0 and "val/policy/trained/success_rate" in start
    assert row["episodes"] == 4 and row["sequences"] == 8  # 2 tasks x 2 samples x 2 seats
    sequences = episodes_to_sequences(episodes, ["a", "a", "b", "b"], "trajectory")
    groups = [s.group for s in sequences]
    assert sorted(set(groups)) == ["a/listener", "a/speaker", "b/listener", "b/speaker"]
    assert all(groups.count(group) == 2 for group in groups)  # n samples of one task and role
    # Only groups whose two samples scored differently have an advantage to train on.
    differing = {g for g in groups if len({s.reward for s in sequences if s.group == g}) > 1}
    assert row["sequences_trained"] == 2 * len(differing)
    for name in ("seat/speaker_0", "seat/listener_0", "role/speaker", "policy/trained"):
        assert 0.0 <= row[f"{name}/success_rate"] <= 1.0
    # The trained seats' reward is what the step reports: here both seats' mean.
    seat_rewards = [t.reward for e in episodes for t in e.trajectories]
    assert row["reward_mean"] == pytest.approx(sum(seat_rewards) / len(seat_rewards))
    assert (tmp_path / "run" / "reward_curve.png").stat().st_size > 1000


def test_frozen_opponent_stays_frozen_and_only_the_trained_seat_learns(tmp_path, tiny_model):
    """The listener is trained against a frozen copy of the starting model as the speaker."""
    config = build_config(
        overrides=multiagent_run(
            tmp_path / "run",
            tiny_model,
            "referential_v0",
            **{
                "env.kwargs": {"rounds": 1},
                "multiagent.seats": {"speaker_0": "frozen", "listener_0": "trained"},
                "algorithm.name": "rae",  # the tiny model's listener pays invalid_penalty: a signal
                "algorithm.drop_zero_advantage": True,  # RAE's first step: no zero advantage
                "rollout.n": 1,
                "rollout.tasks_per_step": 4,
            },
        )
    )
    trainer = NativeTrainer(config)
    frozen = trainer.frozen_players["frozen"].model
    trained_before, frozen_before = weights(trainer.model), weights(frozen)
    assert trained_before.keys() == frozen_before.keys()
    [row] = trainer.train()
    episodes = trainer.last_episodes
    # The frozen speaker played (its seat has tokens) but only the listener is trained on.
    speakers = [t for e in episodes for t in e.trajectories if t.name == "speaker_0"]
    assert all(t.response_ids and t.info["trainable"] is False for t in speakers)
    assert row["episodes"] == 4 and row["sequences"] == row["sequences_trained"] == 4
    assert row["advantage_abs_mean"] > 0 and row["grad_norm"] > 0
    changed = [
        n for n, p in trainer.model.named_parameters() if not torch.equal(p, trained_before[n])
    ]
    assert changed, "the trained model's weights moved"
    for name, parameter in frozen.named_parameters():
        assert torch.equal(parameter, frozen_before[name]), name
        assert not parameter.requires_grad
    assert "rae_baseline/referential_v0:listener" in row
    assert "rae_baseline/referential_v0:speaker" not in row  # frozen seats are not baselined


def test_scripted_opponent_rotated_seats_and_win_rate_per_seat(tmp_path, tiny_model):
    """Kuhn poker against the random player, the trained model moving seat task by task."""
    output = tmp_path / "run"
    code = main(
        [
            f"{key}={value}"
            for key, value in multiagent_run(
                output,
                tiny_model,
                "kuhn_poker_v0",
                **{
                    "multiagent.seats": "{player_0: trained, player_1: random}",
                    "multiagent.rotate": True,
                },
            ).items()
        ]
    )
    assert code == 0
    [row] = read_rows(output)
    for seat_name in ("player_0", "player_1"):
        assert 0.0 <= row[f"seat/{seat_name}/win_rate"] <= 1.0
    assert 0.0 <= row["policy/trained/win_rate"] <= 1.0
    assert row["policy/random/invalid_moves"] == 0  # a scripted player only plays legal moves
    summary = json.loads((output / "summary.json").read_text())
    assert summary["config"]["multiagent"]["rotate"] is True


def test_rollouts_seat_tasks_by_plan_and_seed_each_request(tmp_path, tiny_model):
    config = build_config(
        overrides=multiagent_run(
            tmp_path / "run",
            tiny_model,
            "kuhn_poker_v0",
            **{"multiagent.seats.player_1": "random", "multiagent.rotate": True},
        )
    )
    trainer = NativeTrainer(config)
    try:
        sampler = trainer.sampler
        seeds = [11, 11, 12, 12]
        first = sampler.sample(seeds, temperature=2.0, sampling_seed=5).episodes
        again = sampler.sample(seeds, temperature=2.0, sampling_seed=5).episodes
    finally:
        trainer.close()
    seatings = [episode.info["seating"] for episode in first]
    assert seatings[0] == seatings[1] == {"player_0": "trained", "player_1": "random"}
    assert seatings[2] == seatings[3] == {"player_0": "random", "player_1": "trained"}

    def replies(episodes):
        return [
            [step.model_response for step in t.steps]
            for e in episodes
            for t in e.trajectories
            if t.info["policy"] == "trained"
        ]

    assert replies(first) == replies(again)  # the same sampling seed draws the same replies
    assert replies(first)[0] != replies(first)[1]  # the n samples of a task differ


def test_rae_baselines_survive_a_resume(tmp_path, tiny_model):
    output = tmp_path / "run"
    overrides = multiagent_run(
        output,
        tiny_model,
        "referential_v0",
        **{"env.kwargs": {"rounds": 1}, "algorithm.name": "rae", "rollout.n": 1},
    )
    [first] = NativeTrainer(build_config(overrides=overrides)).train()
    saved = checkpoint.load_latest(output / "checkpoints").extra[ROLE_BASELINES]
    assert saved == {
        key.removeprefix("rae_baseline/"): value
        for key, value in first.items()
        if key.startswith("rae_baseline/")
    }
    resumed = NativeTrainer(
        build_config(overrides={**overrides, "trainer.steps": 2, "trainer.resume": True})
    )
    rows = resumed.train()
    pairs = trained_trajectories(resumed.last_episodes, ["x"] * len(resumed.last_episodes))
    _, expected = rae_advantages(
        [t.reward for t, _ in pairs],
        [role_key("referential_v0", t) for t, _ in pairs],
        saved,
        decay=0.95,
    )
    assert {k: v for k, v in rows[-1].items() if k.startswith("rae_baseline/")} == pytest.approx(
        {f"rae_baseline/{key}": value for key, value in expected.items()}
    )


def test_solver_judge_trains_each_role_on_its_own_reward(tmp_path, tiny_model):
    require_part(importlib.util.find_spec("math_verify") is not None, "needs rllm-envs[math]")
    config = build_config(
        overrides=multiagent_run(
            tmp_path / "run",
            tiny_model,
            "solver_judge_v0",
            # A reply without a boxed answer (or a pick) costs 0.5: the tiny model gets a signal.
            **{"env.kwargs": {"format_penalty": 0.5}, "algorithm.name": "rae", "rollout.n": 1},
        )
    )
    trainer = NativeTrainer(config)
    [row] = trainer.train()
    episodes = trainer.last_episodes
    assert row["sequences"] == 3 * row["episodes"]  # two solvers and the judge, all trained
    for episode in episodes:
        by_seat = {t.name: t for t in episode.trajectories}
        assert by_seat["judge_0"].info["role"] == "judge"
        for name in ("solver_0", "solver_1"):
            solver = by_seat[name]
            assert solver.info["role"] == "solver"
            # A solver's reward is its own answer's: 1 right, 0 wrong, -0.5 unboxed.
            if solver.info.get("is_correct"):
                assert solver.reward == 1.0
            else:
                assert solver.reward in (0.0, -0.5)
        # The judge's is its pick's: 1 when the solver it picked was right.
        judge, picked = by_seat["judge_0"], by_seat["judge_0"].info.get("picked")
        if picked is None:
            assert judge.reward == -0.5
        else:
            assert judge.reward == (1.0 if by_seat[picked].info.get("is_correct") else 0.0)
    for role in ("solver", "judge"):
        assert f"role/{role}/reward_mean" in row
        assert f"rae_baseline/solver_judge_v0:{role}" in row
