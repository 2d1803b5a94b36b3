"""rllm/FrozenLake-v0: maps from seeds, the action grammar, rewards, splits and the solver."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import rllm_envs  # noqa: F401
from gymnasium.envs.toy_text.frozen_lake import MAPS
from rllm_envs.frozenlake import scripted
from rllm_envs.frozenlake.actions import parse_move
from rllm_envs.frozenlake.board import LakeSpec, generate_map, parse_board, render_board
from rllm_envs.frozenlake.env import shipped_tasks
from rllm_envs.frozenlake.solver import MOVE_NAMES, best_policy, shortest_path

CLASSIC_4X4 = {"task_id": "classic-4x4", "map": MAPS["4x4"]}


def make(**kwargs) -> gym.Env:
    return gym.make("rllm/FrozenLake-v0", **kwargs)


def board_of(observation: str):
    return parse_board(observation)


def test_first_observation_explains_the_game_and_shows_the_board():
    env = make()
    observation, info = env.reset(seed=3)
    assert "Legend: P = you, S = start, F = frozen ice" in observation
    assert "H = hole" in observation and "G = goal" in observation
    assert "`Down`" in observation
    lake, player = board_of(observation)
    assert player == (0, 0)
    assert lake == generate_map(LakeSpec(**_spec_fields(env.unwrapped.task)))
    assert info["task_id"].startswith("frozenlake-train-")


def _spec_fields(row):
    return {"seed": row["seed"], "size": row["size"], "p": row["p"], "slippery": row["slippery"]}


def test_same_seed_same_episode_even_on_slippery_ice():
    def trajectory(seed):
        env = make(is_slippery=True)
        observations = [env.reset(seed=seed)[0]]
        for action in ["Down", "Right"] * 10:
            observation, _, terminated, truncated, _ = env.step(action)
            observations.append(observation)
            if terminated or truncated:
                break
        return observations

    assert trajectory(11) == trajectory(11)
    assert len({tuple(trajectory(seed)) for seed in range(6)}) > 1


def test_make_kwargs_override_task_fields():
    env = make(size=7, p=0.9, is_slippery=True)
    observation, info = env.reset(seed=0)
    lake, _ = board_of(observation)
    assert len(lake) == 7 and info["size"] == 7 and info["slippery"] is True
    assert "slippery" in observation
    assert env.unwrapped.max_turns == 6 * 7 * 7


def test_task_fields_choose_the_lake():
    env = make()
    observation, info = env.reset(options={"task": {"seed": 5, "size": 5, "p": 0.6}})
    assert board_of(observation)[0] == generate_map(LakeSpec(5, 5, 0.6, False))
    assert info["slippery"] is False and env.unwrapped.max_turns == 2 * 5 * 5


def test_explicit_map_and_clear_errors_for_bad_lakes():
    env = make()
    observation, _ = env.reset(options={"task": CLASSIC_4X4})
    assert board_of(observation)[0] == tuple(MAPS["4x4"])
    bad_maps = {
        "no path": ["SH", "HG"],
        "square": ["SFF", "FFG"],
        "letters": ["SX", "FG"],
    }
    for expected, bad in bad_maps.items():
        with pytest.raises(ValueError, match=expected):
            env.reset(options={"task": {"map": bad}})
    with pytest.raises(ValueError, match="seed"):
        env.reset(options={"task": {"size": 4}})
    with pytest.raises(ValueError, match="size"):
        make(size=40)
    with pytest.raises(ValueError, match="p "):
        make(p=0.1)


@pytest.mark.parametrize(
    ("reply", "move"),
    [
        ("Left", "Left"),
        ("down", "Down"),
        ("RIGHT", "Right"),
        ("  up\n", "Up"),
        ("`Down`", "Down"),
        ("I should go `Left`, no wait, `Right`.", "Right"),
        ("``` Up ```", "Up"),
        ("0", "Left"),
        ("1", "Down"),
        ("2", "Right"),
        ("3", "Up"),
        ("D", "Down"),
        ("Action: Down", "Down"),
        ("move = left", "Left"),
        ("**Right**", "Right"),
        ('"up".', "Up"),
        ("<think>Maybe `Left`? The hole is there.</think> `Down`", "Down"),
    ],
)
def test_action_grammar_reads_moves(reply, move):
    assert parse_move(reply).action == MOVE_NAMES.index(move)


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("jump", "Could not read a move"),
        ("left then down", "Could not read a move"),
        ("`fly` away", "`fly`".strip("`")),
        ("4", "Could not read"),
        ("x" * 100_000, "Could not read"),
    ],
)
def test_action_grammar_rejects_non_moves_saying_why(reply, problem):
    parsed = parse_move(reply)
    assert parsed.action is None and problem in parsed.problem


def test_invalid_action_does_not_move_and_says_why():
    env = make(format_penalty=0.25)
    env.reset(options={"task": CLASSIC_4X4})
    observation, reward, terminated, truncated, info = env.step("jump over the hole")
    assert "Invalid move" in observation and "Could not read a move" in observation
    assert board_of(observation)[1] == (0, 0)
    assert info["action_valid"] is False and reward == -0.25
    assert not terminated and not truncated
    observation, reward, *_, info = env.step("Down")
    assert board_of(observation)[1] == (1, 0) and info["action_valid"] is True and reward == 0


def test_goal_gives_reward_one_and_a_hole_ends_with_zero():
    env = make()
    env.reset(options={"task": CLASSIC_4X4})
    path = shortest_path(MAPS["4x4"])
    assert path is not None
    for index, action in enumerate(path):
        observation, reward, terminated, truncated, info = env.step(MOVE_NAMES[action])
        assert terminated == (index == len(path) - 1) and not truncated
    assert reward == 1.0 and info["is_correct"] is True and "reached the goal" in observation

    env.reset(options={"task": CLASSIC_4X4})
    env.step("Right")
    observation, reward, terminated, _, info = env.step("Down")  # (1, 1) is a hole
    assert terminated and reward == 0.0 and info["is_correct"] is False
    assert "fell into a hole" in observation


def test_edge_of_the_lake_stops_the_player():
    env = make()
    env.reset(options={"task": CLASSIC_4X4})
    observation, *_ = env.step("Up")
    assert "edge of the lake" in observation and board_of(observation)[1] == (0, 0)


def test_turn_budget_truncates():
    env = make(max_turns=3)
    env.reset(options={"task": CLASSIC_4X4})
    results = [env.step("Left") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)


def test_shipped_splits_are_solvable_and_disjoint():
    train, test = shipped_tasks("train"), shipped_tasks("test")
    assert len(train) == 1000 and len(test) == 200

    def lake(row):
        return generate_map(LakeSpec(row["seed"], row["size"], row["p"], row["slippery"]))

    train_maps = {lake(row) for row in train.rows}
    test_maps = [lake(row) for row in test.rows]
    assert len(train_maps) == 1000 and not train_maps & set(test_maps)
    assert all(shortest_path(m) is not None for m in test_maps)
    assert len({row["task_id"] for row in train.rows + test.rows}) == 1200


def test_generated_maps_are_always_solvable():
    for seed in range(100):
        for size, p in ((2, 0.5), (5, 0.5), (8, 0.6), (3, 1.0)):
            assert shortest_path(generate_map(LakeSpec(seed, size, p, False))) is not None


def test_board_text_round_trips():
    lake = tuple(MAPS["8x8"])
    for player in [(0, 0), (3, 4), (7, 6)]:
        assert parse_board("Header line\n" + render_board(lake, player)) == (lake, player)


def test_scripted_solver_wins_every_solid_lake(capsys):
    assert scripted.main(["--episodes", "8", "--split", "test"]) == 1.0
    assert "success rate: 100.0% over 8 episodes" in capsys.readouterr().out


def test_best_policy_on_slippery_ice_matches_the_known_success_rate():
    # On the classic slippery 4x4 lake the best policy reaches the goal ~74% of the time
    # (value iteration's answer); a random policy gets ~1.5%.
    policy = best_policy(MAPS["4x4"], slippery=True)
    env = make(is_slippery=True)
    wins = 0
    episodes = 300
    for seed in range(episodes):
        observation, _ = env.reset(seed=seed, options={"task": CLASSIC_4X4})
        while True:
            player = board_of(observation)[1]
            observation, reward, terminated, truncated, _ = env.step(MOVE_NAMES[policy[player]])
            if terminated or truncated:
                wins += reward > 0
                break
    assert 0.62 < wins / episodes < 0.86


@pytest.mark.parametrize("slippery", [False, True])
def test_moves_rewards_and_random_draws_match_gymnasiums_frozenlake(slippery):
    # The env computes Gymnasium's transition rule per step instead of building its table; a
    # seeded episode must be exactly the one Gymnasium plays, on solid and on slippery ice.
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymnasiumLake

    plays = 0
    for seed in range(60):
        spec = LakeSpec(seed=seed, size=4 + seed % 5, p=0.8, slippery=slippery)
        lake_map = generate_map(spec)
        ours, theirs = make(), GymnasiumLake(desc=list(lake_map), is_slippery=slippery)
        # Same seed, and each reset and step takes as many draws as Gymnasium's: the slips
        # then agree without syncing the generators.
        ours.reset(seed=seed, options={"task": {"map": list(lake_map), "slippery": slippery}})
        theirs.reset(seed=seed)
        moves = np.random.default_rng(seed).integers(0, 4, size=40)
        for action in moves:
            observation, reward, terminated, truncated, _ = ours.step(MOVE_NAMES[action])
            state, their_reward, their_terminated, _, _ = theirs.step(int(action))
            _, player = board_of(observation)
            if not terminated:
                assert player == divmod(state, len(lake_map))
            assert (reward, terminated) == (their_reward, their_terminated)
            plays += 1
            if terminated or truncated:
                break
    assert plays > 200


def test_generated_maps_are_the_ones_gymnasium_generates():
    from gymnasium.envs.toy_text.frozen_lake import generate_random_map

    for size in range(2, 17):
        for seed in range(40):
            for p in (0.5, 0.8, 1.0):
                expected = tuple(generate_random_map(size=size, p=p, seed=seed))
                assert generate_map(LakeSpec(seed, size, p, False)) == expected, (size, seed, p)
