"""The curriculum: which training tasks a step plays, weighted by measured success.

Sampler weights against hand-computed values, the draws' determinism, the estimates kept in the
checkpoint (a resumed run draws the same tasks as a straight one), and the settings refused.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from rllm_agents.types import Episode, Trajectory
from rllm_envs import resolve_dataset
from rllm_train.config import ConfigError, build_config
from rllm_train.config.curriculum import CURRICULUM_KINDS, UNIFORM, CurriculumConfig
from rllm_train.datasets import RunData, step_rows
from rllm_train.native import checkpoint
from rllm_train.native.trainer import NativeTrainer, validation_seeds
from rllm_train.run.curriculum import (
    CURRICULUM_KEY,
    WEIGHTINGS,
    Curriculum,
    CurriculumState,
    TaskPool,
    TaskRecord,
    curriculum_for_run,
    entropy,
    fold,
    group_successes,
    learning_progress,
    row_keys,
    step_task_seeds,
    success_variance,
    task_probabilities,
    uninformative_share,
)

from tests.train import reply_length
from tests.train.conftest import run_overrides


def record(p: float, last_step: int, slow: float | None = None) -> TaskRecord:
    return TaskRecord(fast=p, slow=p if slow is None else slow, plays=1, last_step=last_step)


def test_every_configurable_kind_has_a_weighting():
    assert set(WEIGHTINGS) | {UNIFORM} == set(CURRICULUM_KINDS)


def test_plr_probabilities_match_the_hand_computed_ones():
    settings = CurriculumConfig(kind="plr", temperature=1.0, staleness_mix=0.2, uniform_mix=0.1)
    # Step 3; A: p 0.5, played at step 2; B: p 1.0 (always solved), step 0; C: p 0.2, step 1;
    # D: never played.
    records = [record(0.5, 2), record(1.0, 0), record(0.2, 1), None]
    # Scores p(1-p): 0.25, 0, 0.16 -> by score 1/1.64, 0, 0.64/1.64. Staleness 1, 3, 2 -> /6.
    replay = [
        0.8 * (1 / 1.64) + 0.2 * (1 / 6),
        0.8 * 0 + 0.2 * (3 / 6),
        0.8 * (0.64 / 1.64) + 0.2 * (2 / 6),
    ]
    # The three played tasks share 3/4; D keeps its uniform 1/4; then 10 % spread evenly.
    before_mix = [3 / 4 * share for share in replay] + [1 / 4]
    expected = [0.9 * value + 0.1 / 4 for value in before_mix]
    got = task_probabilities(records, 3, success_variance, settings)
    assert got == pytest.approx(expected, abs=1e-12)
    assert got.sum() == pytest.approx(1.0)
    assert got[1] == pytest.approx(0.0925)  # the solved task lives on staleness and the mix


def test_learning_progress_and_the_minimum_probability_match_hand_computed_ones():
    settings = CurriculumConfig(
        kind="learning_progress", temperature=0.5, staleness_mix=0.0, uniform_mix=0.1
    )
    # |fast - slow|: 0.2, 0.1, 0 -> scaled by the largest 1, 0.5, 0 -> squared (1/temperature)
    # 1, 0.25, 0 -> 0.8, 0.2, 0.
    records = [record(0.6, 0, slow=0.4), record(0.3, 0, slow=0.4), record(0.7, 0)]
    got = task_probabilities(records, 1, learning_progress, settings)
    assert got == pytest.approx([0.9 * 0.8 + 0.1 / 3, 0.9 * 0.2 + 0.1 / 3, 0.1 / 3], abs=1e-12)
    # No progress on C: it keeps exactly the floor, uniform_mix / N.
    assert got[2] == pytest.approx(settings.uniform_mix / 3)


def test_estimates_are_moving_averages_started_at_the_first_observation():
    settings = CurriculumConfig(fast_rate=0.5, slow_rate=0.1)
    records = fold({}, {"a": 1.0}, 0, settings)
    assert records["a"] == TaskRecord(fast=1.0, slow=1.0, plays=1, last_step=0)
    records = fold(records, {"a": 0.0, "b": 0.5}, 3, settings)
    assert records["a"] == TaskRecord(fast=0.5, slow=0.9, plays=2, last_step=3)
    assert learning_progress(records["a"]) == pytest.approx(0.4)
    assert success_variance(records["b"]) == pytest.approx(0.25)


def episode(reward: float, *, failure: str | None = None) -> Episode:
    return Episode(id="e", task={}, trajectories=[Trajectory(reward=reward)], failure=failure)


def test_group_success_and_uninformative_groups_from_episodes():
    episodes = [episode(1.0), episode(0.0), episode(1.0), episode(1.0), episode(0.0, failure="x")]
    keys = ["a", "a", "b", "b", "b"]
    # The infrastructure failure says nothing about the policy: b is 2 of 2, not 2 of 3.
    assert group_successes(episodes, keys, success_reward=1.0) == {"a": 0.5, "b": 1.0}
    assert group_successes(episodes, keys, success_reward=0.5) == {"a": 0.5, "b": 1.0}
    # a's rewards differ (a gradient), b's counted ones are all 1.0 (none).
    assert uninformative_share(episodes, keys) == 0.5


def small_pool_curriculum(kind: str = "plr", lag: int = 0, **settings) -> Curriculum:
    rows = resolve_dataset("arithmetic:train").take(6)
    return Curriculum(
        CurriculumConfig(kind=kind, **settings),
        run_seed=5,
        tasks_per_step=2,
        rows=rows,
        pool=TaskPool(row_keys(rows), rows=rows),
        lag=lag,
    )


def played(rewards: list[float]) -> list[Episode]:
    return [episode(reward) for reward in rewards]


def test_draws_depend_on_the_run_seed_step_and_estimates_alone():
    first, second = small_pool_curriculum(), small_pool_curriculum()
    for step in range(4):
        plan = first.plan(step)
        assert plan.keys == second.plan(step).keys == first.plan(step).keys
        assert len(set(plan.keys)) == 2  # distinct tasks within a step
        assert plan.seeds == step_task_seeds(5, step, 2)  # the env's reset seeds as before
        keys = [key for key in plan.keys for _ in range(2)]
        for curriculum in (first, second):
            curriculum.record(step, played([1.0, 0.0, 1.0, 1.0]), keys)
    # The estimates steer the draw: after four steps the weights are no longer uniform.
    assert not np.allclose(first.plan(4).probabilities, 1 / 6)
    # ...and they are all a checkpoint needs: a curriculum restored from them draws the same.
    restored = small_pool_curriculum()
    restored.restore(json.loads(json.dumps(first.state.to_dict())))
    assert restored.plan(4).keys == first.plan(4).keys
    assert np.array_equal(restored.plan(4).probabilities, first.plan(4).probabilities)


def test_uniform_keeps_the_runs_own_draw_and_still_tracks_success():
    rows = resolve_dataset("arithmetic:train")
    curriculum = Curriculum(CurriculumConfig(), run_seed=3, tasks_per_step=4, rows=rows, pool=None)
    plan = curriculum.plan(7)
    assert plan.rows == step_rows(rows, 3, 7, 4)  # the draw of runs before curricula
    curriculum.record(7, played([1.0] * 4), plan.keys)
    assert set(curriculum.state.records) == set(plan.keys)
    assert curriculum.plan(8).rows == step_rows(rows, 3, 8, 4)


def test_a_lagging_draw_uses_only_the_steps_before_its_lag():
    """Played ahead by max_staleness = 1, step s draws from the steps before s - 1, whatever
    has been recorded meanwhile."""
    lagging, informed = small_pool_curriculum(lag=1), small_pool_curriculum(lag=0)
    early = small_pool_curriculum(lag=1)
    outcomes = [[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]]
    for step, rewards in enumerate(outcomes):
        keys = [key for key in lagging.plan(step).keys for _ in range(2)]
        for curriculum in (lagging, informed):
            curriculum.record(step, played(rewards), keys)
        if step < 2:
            early.record(step, played(rewards), keys)
    # Step 3 with lag 1 sees steps 0-1 only: as if step 2 had not been recorded yet...
    assert np.array_equal(lagging.plan(3).probabilities, early.plan(3).probabilities)
    # ...while without a lag step 2 counts.
    assert not np.array_equal(lagging.plan(3).probabilities, informed.plan(3).probabilities)
    # The state keeps the step a lagging draw may not see yet apart, through a checkpoint.
    state = CurriculumState.from_dict(lagging.state.to_dict())
    assert state.settled_before == 2 and list(state.recent) == [2]
    # Resumed with a larger lag than it was saved with, a run draws from what the checkpoint
    # settled (it cannot unlearn a step): the same as the run it continues.
    larger = small_pool_curriculum(lag=2)
    larger.restore(informed.state.to_dict())
    assert np.array_equal(larger.plan(3).probabilities, informed.plan(3).probabilities)


def test_a_seed_pool_leaves_validation_seeds_out():
    config = build_config(
        overrides={
            "env.id": "rllm/GymText-v0",
            "curriculum.kind": "plr",
            "curriculum.seed_pool": 64,
        }
    )
    held_out = validation_seeds(0, config.trainer.val_tasks)
    curriculum = curriculum_for_run(config, RunData(), multiagent=False, validation_seeds=held_out)
    assert curriculum.pool is not None and len(set(curriculum.pool.seeds)) == 64
    assert not set(curriculum.pool.seeds) & set(held_out)
    plan = curriculum.plan(0)
    assert plan.rows is None and set(plan.seeds) <= set(curriculum.pool.seeds)


# -- a real run on the tiny model ---------------------------------------------------------------


@pytest.fixture(scope="module")
def small_task_file(tmp_path_factory):
    """Five arithmetic rows: a pool small enough that the estimates steer the draw at once."""
    path = tmp_path_factory.mktemp("tasks") / "train.jsonl"
    rows = resolve_dataset("arithmetic:train").take(5)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def curriculum_run(output, model, task_file, steps: int, **changes) -> dict:
    # Rewards are the reply's length / 50: "success" is a reply of 40 characters or more,
    # which the tiny model's samples sometimes reach and sometimes do not.
    return run_overrides(
        output,
        model,
        **{
            "env.id": reply_length.MODULE_ENV_ID,
            "data.train": str(task_file),
            "curriculum.kind": "plr",
            "curriculum.success_reward": 0.8,
            "rollout.temperature": 2.0,
            "trainer.steps": steps,
            "trainer.save_every": 1,
            "trainer.tensorboard": False,
            **changes,
        },
    )


def without_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


@pytest.mark.slow
def test_a_resumed_run_draws_the_tasks_of_a_straight_one(tmp_path, tiny_model, small_task_file):
    straight = NativeTrainer(
        build_config(
            overrides=curriculum_run(tmp_path / "straight", tiny_model, small_task_file, 3)
        )
    ).train()
    for row in straight:
        assert 0.0 <= row["curriculum/uninformative_groups"] <= 1.0
        assert 0.0 <= row["curriculum/mean_p"] <= 1.0
        assert 0 < row["curriculum/entropy"] <= math.log(5) + 1e-9
    assert straight[-1]["curriculum/tasks_seen"] >= 3

    stopped = tmp_path / "stopped"
    NativeTrainer(
        build_config(overrides=curriculum_run(stopped, tiny_model, small_task_file, 1))
    ).train()
    saved = checkpoint.load_latest(stopped / "checkpoints")
    assert saved is not None and saved.step == 1
    state = CurriculumState.from_dict(saved.extra[CURRICULUM_KEY])
    assert len(state.records) == 2 and state.settled_before == 1  # step 1's two tasks
    resumed = NativeTrainer(
        build_config(
            overrides=curriculum_run(
                stopped, tiny_model, small_task_file, 3, **{"trainer.resume": True}
            )
        )
    )
    # The checkpoint's estimates steer step 2's draw away from a fresh curriculum's (uniform).
    fresh, restored = small_pool_from(resumed), small_pool_from(resumed)
    restored.restore(saved.extra[CURRICULUM_KEY])
    assert fresh.plan(1).probabilities == pytest.approx(np.full(5, 0.2))
    assert not np.allclose(restored.plan(1).probabilities, 0.2)
    rows = resumed.train()
    assert without_times(rows) == without_times(straight)
    assert [row["task_ids"] for row in rows] == [row["task_ids"] for row in straight]


def small_pool_from(trainer: NativeTrainer) -> Curriculum:
    """A curriculum like `trainer`'s, with nothing recorded."""
    current = trainer.curriculum
    return Curriculum(
        current.settings,
        run_seed=current.run_seed,
        tasks_per_step=current.tasks_per_step,
        rows=current.rows,
        pool=current.pool,
        lag=current.lag,
    )


@pytest.mark.slow
def test_played_ahead_steps_draw_from_the_estimates_their_lag_allows(
    tmp_path, tiny_model, small_task_file
):
    """rollout.mode=async, max_staleness 1: the player picks step s's tasks while step s - 1
    trains; they are those a curriculum given the observations of steps before s - 1 picks."""
    from rllm_agents.episodes.records import TRAIN_EPISODES_FOLDER, read_episodes

    output = tmp_path / "run"
    overrides = curriculum_run(
        output,
        tiny_model,
        small_task_file,
        4,
        **{
            "rollout.mode": "async",
            "rollout.max_staleness": 1,
            "trainer.save_every": 0,
            "trainer.save_episodes": True,
        },
    )
    trainer = NativeTrainer(build_config(overrides=overrides))
    rows = trainer.train()
    replay = small_pool_from(trainer)
    assert replay.lag == 1
    for step, row in enumerate(rows):
        plan = replay.plan(step)
        assert sorted(set(plan.keys)) == row["task_ids"], step
        # The weights it drew with, too (from step 2 on they differ from a lag of 0's).
        assert row["curriculum/entropy"] == pytest.approx(entropy(plan.probabilities)), step
        episodes = list(
            read_episodes(output / TRAIN_EPISODES_FOLDER / f"step_{step + 1:04d}.jsonl")
        )
        replay.record(step, episodes, plan.repeated(2).keys)
    assert replay.state == trainer.curriculum.state


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"curriculum.kind": "plr", "trainer.backend": "verl"}, "curriculum.kind"),
        ({"curriculum.kind": "plr", "algorithm.name": "sft", "sft.data": "x"}, "curriculum.kind"),
        ({"curriculum.kind": "hardest_first"}, "curriculum.kind"),
        (
            {"curriculum.kind": "learning_progress", "curriculum.slow_rate": 0.5},
            "curriculum.slow_rate",
        ),
        ({"curriculum.uniform_mix": 0}, "curriculum.uniform_mix"),
        ({"curriculum.fast_rate": 1.5}, "curriculum.fast_rate"),
        ({"curriculum.temperature": 0}, "curriculum.temperature"),
    ],
)
def test_settings_a_curriculum_cannot_serve_are_refused_by_name(overrides, named):
    with pytest.raises(ConfigError, match=named):
        build_config(overrides=overrides)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        # No task rows and no seed pool: nothing finite to weigh.
        ({"env.id": "rllm/GymText-v0", "curriculum.kind": "plr"}, "curriculum.seed_pool"),
        ({"env.id": "kuhn_poker_v0", "curriculum.kind": "plr"}, "curriculum.kind"),
        (
            {
                "curriculum.kind": "plr",
                "data.train": "arithmetic:train",
                "rollout.tasks_per_step": 81,
            },
            "rollout.tasks_per_step",
        ),
    ],
)
def test_runs_a_curriculum_cannot_steer_are_refused_before_the_model_loads(
    tmp_path, overrides, named
):
    config = build_config(
        overrides={"trainer.output": str(tmp_path), "model.name": "nowhere", **overrides}
    )
    with pytest.raises(ConfigError, match=named):
        NativeTrainer(config)
