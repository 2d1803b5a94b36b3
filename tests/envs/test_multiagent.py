"""The multi-agent text envs: PettingZoo's own test suites on every env, and each game's rules."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import warnings

import numpy as np
import pytest
from pettingzoo.test import (
    api_test,
    max_cycles_test,
    parallel_api_test,
    parallel_seed_test,
    seed_test,
)
from rllm_envs.multiagent import ENV_MODULES
from rllm_envs.multiagent.moves import read_move

from tests.parts import require_part

# PettingZoo's api_test advises numeric spaces and NumPy observations; text envs cannot follow
# that advice, by design. Every other warning fails the suites.
TEXT_SPACE_ADVICE = (
    "Observation is not a NumPy array",
    "Observation space for each agent probably should be",
    "Action space for each agent probably should be",
)


@contextlib.contextmanager
def warnings_as_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for advice in TEXT_SPACE_ADVICE:
            warnings.filterwarnings("ignore", message=advice)
        yield


def module_or_skip(name: str):
    """The versioned env module; its optional extra missing skips (locally) or fails (CI)."""
    if name == "solver_judge_v0":
        require_part(importlib.util.find_spec("math_verify") is not None, "needs rllm-envs[math]")
    if name == "classic_v0":
        require_part(importlib.util.find_spec("pygame") is not None, "needs rllm-envs[multiagent]")
    return importlib.import_module(f"rllm_envs.multiagent.{name}")


# (module, constructor kwargs): every env, and the variants with their own code paths.
VARIANTS = [
    ("tictactoe_v0", {}),
    ("tictactoe_v0", {"opening_moves": 2}),
    ("kuhn_poker_v0", {}),
    ("referential_v0", {}),
    ("referential_v0", {"taboo": True, "num_candidates": 5, "rounds": 1}),
    ("solver_judge_v0", {"num_solvers": 3}),
    ("classic_v0", {"game": "tictactoe_v3"}),
    ("classic_v0", {"game": "connect_four_v3"}),
    ("classic_v0", {"game": "chess_v6", "max_turns": 60}),
]
IDS = [f"{name}-{'-'.join(map(str, kwargs.values())) or 'default'}" for name, kwargs in VARIANTS]


def test_every_env_module_is_tested():
    assert {name for name, _ in VARIANTS} == set(ENV_MODULES)


@pytest.mark.parametrize(("name", "kwargs"), VARIANTS, ids=IDS)
def test_pettingzoo_suites_pass_without_warnings(name, kwargs):
    module = module_or_skip(name)
    with warnings_as_errors():
        api_test(module.env(**kwargs), num_cycles=200)
        parallel_api_test(module.parallel_env(**kwargs), num_cycles=200)
        seed_test(lambda: module.env(**kwargs), num_cycles=100)
        parallel_seed_test(lambda: module.parallel_env(**kwargs), num_cycles=100)


def test_max_cycles_test_passes_on_the_iterated_game():
    # The only env random play keeps going for max_cycles cycles: turn-based games end at a
    # forfeit or a finished game and solver-judge after two cycles, so the test cannot apply.
    module = module_or_skip("referential_v0")
    with warnings_as_errors():
        max_cycles_test(module)


def random_legal_play(env, seed: int, rng_seed: int = 0) -> list:
    """A transcript of one AEC game under random legal moves (free-text turns: fixed text)."""
    rng = np.random.default_rng(rng_seed)
    env.reset(seed=seed)
    transcript = []
    for agent in env.agent_iter(500):
        observation, reward, terminated, truncated, info = env.last()
        transcript.append((agent, observation["text"], reward, terminated, truncated, info))
        if terminated or truncated:
            env.step(None)
        elif info["legal_moves"]:
            env.step(str(rng.choice(info["legal_moves"])))
        else:
            env.step(r"Let me think. \boxed{7}")
    return transcript


@pytest.mark.parametrize(("name", "kwargs"), VARIANTS, ids=IDS)
def test_the_seed_fixes_the_whole_episode(name, kwargs):
    # parallel_seed_test stops after one step; this replays whole games.
    module = module_or_skip(name)
    first = random_legal_play(module.env(**kwargs), seed=11)
    again = random_legal_play(module.env(**kwargs), seed=11)
    assert first == again
    assert first[-1][3] or first[-1][4], "the game reached its end"
    other_seeds = [random_legal_play(module.env(**kwargs), seed=s) for s in range(12, 16)]
    if name in ("kuhn_poker_v0", "referential_v0", "solver_judge_v0"):  # seeded setups
        assert any(t[0][5]["task_id"] != first[0][5]["task_id"] for t in other_seeds)


@pytest.mark.parametrize(("name", "kwargs"), VARIANTS, ids=IDS)
def test_infos_carry_legal_moves_never_an_action_mask(name, kwargs):
    module = module_or_skip(name)
    env = module.parallel_env(**kwargs)
    observations, infos = env.reset(seed=0)
    for agent, info in infos.items():
        assert "action_mask" not in info and "action_mask" not in observations[agent]
        assert {"task_id", "role", "to_act", "legal_moves", "turn"} <= set(info)
        assert all(isinstance(move, str) for move in info["legal_moves"])
        if not info["to_act"]:
            assert info["legal_moves"] == [] and "Waiting" in observations[agent]["text"]
    assert any(info["to_act"] for info in infos.values())
    env.close()


# -- the move grammar ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "move"),
    [
        ("`B2`", "B2"),
        ("I think the centre is best. Move: b2.", "B2"),
        ("<think>A1 looks good but B2 is better</think> `C3`", "C3"),
        ("I'll avoid A1 and take the centre, B2!", "B2"),
        ("  b2  ", "B2"),
        ("5", "B2"),  # an alias, as the whole move
        ("I need 5 moves to win", None),  # aliases are not read inside prose
        ("<think>B2", None),  # thinking never closed
        ("", None),
        ("`Z9`", None),
    ],
)
def test_the_move_grammar(reply, move):
    reading = read_move(reply, ["A1", "B2", "C3"], {"1": "A1", "5": "B2", "9": "C3"})
    assert reading.move == move
    if move is None:
        assert reading.problem


# -- tic-tac-toe -----------------------------------------------------------------------------
def play(env, *moves):
    """Play `moves` in turn; return the last (rewards, terminations, infos)."""
    for move in moves:
        env.step(move)
    return env.rewards, env.terminations, env.infos


def test_tictactoe_three_in_a_row_wins_and_pays_plus_minus_one():
    from rllm_envs.multiagent import tictactoe_v0

    env = tictactoe_v0.env()
    env.reset(seed=0)
    rewards, terminations, infos = play(env, "A1", "A2", "B1", "B2", "`C1`")
    assert rewards == {"player_0": 1.0, "player_1": -1.0}
    assert all(terminations.values())
    assert infos["player_0"]["outcome"] == "win" and infos["player_1"]["outcome"] == "loss"
    assert infos["player_1"]["end_reason"] == "finished"
    assert "you lost" in env.observe("player_1")["text"]


def test_tictactoe_full_board_is_a_draw():
    from rllm_envs.multiagent import tictactoe_v0

    env = tictactoe_v0.env()
    env.reset()
    rewards, _, infos = play(env, "A1", "B1", "C1", "B2", "A2", "C2", "B3", "A3", "C3")
    assert rewards == {"player_0": 0.0, "player_1": 0.0}
    assert {info["outcome"] for info in infos.values()} == {"draw"}


def test_an_invalid_move_is_explained_then_a_second_one_forfeits():
    from rllm_envs.multiagent import tictactoe_v0

    env = tictactoe_v0.env()
    env.reset()
    env.step("B2")
    env.step("`B2`")  # taken
    assert env.agent_selection == "player_1", "the same player moves again"
    text = env.observe("player_1")["text"]
    assert "Invalid move: `B2` is not one of the legal moves" in text and "A1" in text
    assert env.infos["player_1"]["action_valid"] is False
    assert env.infos["player_1"]["invalid_moves"] == 1
    assert not any(env.terminations.values())
    env.step("I resign")
    assert env.rewards == {"player_0": 0.5, "player_1": -1.5}
    assert env.infos["player_1"]["outcome"] == "loss" and env.infos["player_0"]["outcome"] == "win"
    assert env.infos["player_0"]["end_reason"] == "forfeit"


def test_forfeit_rewards_and_allowance_are_arguments():
    from rllm_envs.multiagent import tictactoe_v0

    env = tictactoe_v0.env(invalid_move_allowance=0, forfeit_rewards=(-1.0, 1.0))
    env.reset()
    env.step(b"\xff garbage")  # any object a policy produces is read as text
    assert env.rewards == {"player_0": -1.0, "player_1": 1.0}


def test_max_turns_truncates_as_a_draw():
    from rllm_envs.multiagent import tictactoe_v0

    env = tictactoe_v0.env(max_turns=3)
    env.reset()
    play(env, "A1", "B1", "C1")
    assert all(env.truncations.values()) and not any(env.terminations.values())
    assert env.rewards == {"player_0": 0.0, "player_1": 0.0}
    assert env.infos["player_0"]["outcome"] == "draw"


def test_openings_come_from_the_seed_or_the_task():
    from rllm_envs.multiagent import tictactoe_v0

    env = tictactoe_v0.env(opening_moves=2)
    env.reset(seed=3)
    board = env.infos["player_0"]["board"]
    assert board.count("X") == 1 and board.count("O") == 1
    assert env.infos["player_0"]["task_id"].startswith("tictactoe/")
    env.reset(options={"task": {"opening": ["B2"]}})
    assert env.agent_selection == "player_1" and env.infos["player_1"]["board"][4] == "X"
    with pytest.raises(ValueError, match="not legal"):
        env.reset(options={"task": {"opening": ["B2", "B2"]}})


def test_the_observation_tells_the_opponents_move_and_lists_legal_moves():
    from rllm_envs.multiagent import tictactoe_v0

    env = tictactoe_v0.env(render_mode="ansi")
    env.reset()
    first = env.observe("player_0")["text"]
    assert first.startswith("You are playing tic-tac-toe as X")
    env.step("B2")
    text = env.observe("player_1")["text"]
    assert "player_0 (X) played B2." in text and "Legal moves: A1, B1, C1, A2, C2" in text
    assert "Waiting for player_1" in env.observe("player_0")["text"]
    assert env.render().splitlines()[2] == "2 . X ."


# -- Kuhn poker ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cards", "moves", "rewards"),
    [
        (["K", "J"], ["check", "check"], (1.0, -1.0)),
        (["J", "Q"], ["bet", "call"], (-2.0, 2.0)),
        (["J", "K"], ["bet", "fold"], (1.0, -1.0)),
        (["Q", "J"], ["check", "bet", "fold"], (-1.0, 1.0)),
        (["Q", "J"], ["check", "bet", "call"], (2.0, -2.0)),
    ],
)
def test_kuhn_poker_pays_the_pot(cards, moves, rewards):
    from rllm_envs.multiagent import kuhn_poker_v0

    env = kuhn_poker_v0.env()
    env.reset(options={"task": {"cards": cards}})
    for move in moves:
        assert not any(env.terminations.values())
        env.step(f"I {move}." if move != "check" else "`check`")
    assert (env.rewards["player_0"], env.rewards["player_1"]) == rewards
    assert env.infos["player_0"]["task_id"] == "kuhn_poker/" + "".join(cards)


def kuhn_best_response_to_random(info):
    """Player 0's best response to a uniformly random opponent: always bet (+1.5 with a K,
    +0.5 with a Q, -0.5 with a J; +0.5 a hand)."""
    return "bet"


def test_kuhn_poker_matches_the_known_value_of_a_best_response():
    from rllm_envs.multiagent import kuhn_poker_v0

    env = kuhn_poker_v0.env()
    rng = np.random.default_rng(0)
    hands, total, deals = 3000, 0.0, set()
    for seed in range(hands):
        env.reset(seed=seed)
        deals.add(env.infos["player_0"]["task_id"])
        for agent in env.agent_iter():
            _, reward, terminated, truncated, info = env.last()
            if terminated or truncated:
                total += reward if agent == "player_0" else 0.0
                env.step(None)
            elif agent == "player_0":
                env.step(kuhn_best_response_to_random(info))
            else:
                env.step(str(rng.choice(info["legal_moves"])))
    assert len(deals) == 6
    assert total / hands == pytest.approx(0.5, abs=0.07)


# -- the referential game --------------------------------------------------------------------
def test_a_speaker_naming_the_target_and_a_listener_reading_it_win_every_round():
    from rllm_envs.multiagent import referential_v0

    env = referential_v0.parallel_env(rounds=3, num_candidates=4)
    observations, infos = env.reset(seed=5)
    total = {"speaker_0": 0.0, "listener_0": 0.0}
    while env.agents:
        actions = {agent: "" for agent in env.agents}
        if infos["speaker_0"]["to_act"]:
            actions["speaker_0"] = f"It is the {infos['speaker_0']['target']}."
        else:
            message = infos["listener_0"]["message"]
            picked = [item for item in infos["listener_0"]["legal_moves"] if item in message]
            actions["listener_0"] = f"`{picked[0]}`"
        observations, rewards, terminations, truncations, infos = env.step(actions)
        for agent, reward in rewards.items():
            total[agent] += reward
    assert total == {"speaker_0": 3.0, "listener_0": 3.0}
    assert all(terminations.values())
    assert infos["listener_0"]["rounds_correct"] == 3
    assert "3 of 3 rounds correct" in observations["speaker_0"]["text"]


def test_the_listener_sees_the_items_in_its_own_order_and_the_message():
    from rllm_envs.multiagent import referential_v0

    env = referential_v0.parallel_env(num_candidates=6)
    orders_differ = 0
    for seed in range(10):
        _, infos = env.reset(seed=seed)
        orders_differ += infos["speaker_0"]["items"] != infos["listener_0"]["items"]
        assert sorted(infos["speaker_0"]["items"]) == sorted(infos["listener_0"]["items"])
        observations, *_ = env.step({"speaker_0": "the round one", "listener_0": "ignored"})
        text = observations["listener_0"]["text"]
        assert 'The speaker says: "the round one"' in text and "1. " in text
    assert orders_differ >= 8


def test_random_listening_scores_about_one_in_n():
    from rllm_envs.multiagent import referential_v0

    env = referential_v0.parallel_env(rounds=1, num_candidates=3)
    rng = np.random.default_rng(1)
    wins = 0
    for seed in range(600):
        env.reset(seed=seed)
        *_, infos = env.step({"speaker_0": "no idea", "listener_0": ""})
        choice = str(rng.choice(infos["listener_0"]["legal_moves"]))
        _, rewards, *_ = env.step({"listener_0": f"`{choice}`"})
        wins += rewards["listener_0"] == 1.0
    assert wins / 600 == pytest.approx(1 / 3, abs=0.06)


def test_an_unreadable_pick_misses_and_costs_the_listener():
    from rllm_envs.multiagent import referential_v0

    env = referential_v0.parallel_env(rounds=2)
    env.reset(seed=0)
    env.step({"speaker_0": "hello", "listener_0": ""})
    observations, rewards, _, _, infos = env.step({"listener_0": "I cannot tell"})
    assert rewards == {"speaker_0": 0.0, "listener_0": -0.5}
    assert infos["listener_0"]["action_valid"] is False
    assert "named no item" in observations["speaker_0"]["text"]
    assert env.agents, "the game goes on to the next round"


def test_taboo_messages_are_refused():
    from rllm_envs.multiagent import referential_v0

    env = referential_v0.parallel_env(taboo=True, rounds=1)
    _, infos = env.reset(seed=0)
    target = infos["speaker_0"]["target"]
    observations, rewards, _, _, infos = env.step({"speaker_0": f"It is the {target.upper()}!"})
    assert rewards["speaker_0"] == -0.5 and infos["speaker_0"]["action_valid"] is False
    assert 'The speaker says: "(nothing)"' in observations["listener_0"]["text"]


# -- solver-judge ----------------------------------------------------------------------------
TASK = {"id": "t1", "question": "What is 6 times 7?", "answer": "42"}


def test_solvers_are_graded_and_the_judge_is_paid_for_a_correct_pick():
    module = module_or_skip("solver_judge_v0")
    env = module.parallel_env(num_solvers=3, format_penalty=0.25)
    observations, infos = env.reset(options={"task": TASK})
    assert infos["judge_0"]["to_act"] is False and infos["solver_0"]["role"] == "solver"
    assert "What is 6 times 7?" in observations["solver_1"]["text"]
    replies = {"solver_0": r"\boxed{41}", "solver_1": r"6*7 = \boxed{42}", "solver_2": "42"}
    observations, rewards, _, _, infos = env.step({**replies, "judge_0": "ignored"})
    assert rewards == {"solver_0": 0.0, "solver_1": 1.0, "solver_2": -0.25, "judge_0": 0.0}
    judge_prompt = observations["judge_0"]["text"]
    assert "Solution 2:\n6*7 = \\boxed{42}" in judge_prompt and "Solution 3:\n42" in judge_prompt
    assert infos["judge_0"]["legal_moves"] == ["1", "2", "3"]
    _, rewards, terminations, _, infos = env.step({"judge_0": "Solution 2 is right: `2`"})
    assert rewards["judge_0"] == 1.0 and all(terminations.values())
    assert infos["judge_0"]["picked"] == "solver_1" and infos["judge_0"]["any_solver_correct"]
    assert infos["solver_1"]["is_correct"] and not infos["solver_0"]["is_correct"]
    env.close()


def test_a_wrong_pick_and_an_unreadable_pick():
    module = module_or_skip("solver_judge_v0")
    env = module.parallel_env(num_solvers=2)
    for verdict, reward, picked in (("`1`", 0.0, "solver_0"), ("no idea", 0.0, None)):
        env.reset(options={"task": TASK})
        env.step({"solver_0": r"\boxed{40}", "solver_1": r"\boxed{42}"})
        _, rewards, _, _, infos = env.step({"judge_0": verdict})
        assert rewards["judge_0"] == reward and infos["judge_0"]["picked"] == picked
        assert infos["judge_0"]["action_valid"] is (picked is not None)
    env.close()


@pytest.mark.slow
def test_a_grader_that_hangs_ends_the_episode_as_an_infrastructure_failure():
    module = module_or_skip("solver_judge_v0")
    env = module.parallel_env(num_solvers=1, grading_timeout_s=1.0)
    env.reset(options={"task": {"question": "q", "answer": "x^2"}})
    env.step({"solver_0": r"\boxed{x^2}"})  # starts the worker, not counted in the deadline
    env.reset(options={"task": {"question": "q", "answer": "x^2"}})
    observations, rewards, terminations, truncations, infos = env.step(
        {"solver_0": r"\boxed{9^{9^{9^{9}}}}"}
    )
    assert all(truncations.values()) and not any(terminations.values())
    assert {info["failure"] for info in infos.values()} == {"grader"}
    assert set(rewards.values()) == {0.0} and not env.agents
    assert "not your fault" in observations["judge_0"]["text"]
    env.close()


# -- PettingZoo's classic games ----------------------------------------------------------------
def test_classic_tictactoe_cells_are_pettingzoos_cells():
    module = module_or_skip("classic_v0")
    env = module.env(game="tictactoe_v3")
    env.reset(seed=0)
    assert env.possible_agents == ["player_1", "player_2"]
    play(env, "A1", "B1", "A2", "B2", "A3")  # column A top to bottom
    assert env.rewards == {"player_1": 1.0, "player_2": -1.0}
    assert env.infos["player_2"]["outcome"] == "loss"
    board = env.unwrapped.game.view("player_1").splitlines()
    assert board[2:] == ["1 X O .", "2 X O .", "3 X . ."]
    env.close()


def test_classic_connect_four_vertical_four_wins():
    module = module_or_skip("classic_v0")
    env = module.env(game="connect_four_v3")
    env.reset()
    play(env, "4", "5", "4", "5", "4", "5")
    text = env.observe("player_0")["text"]
    assert ". . . X O . ." in text and "Legal moves: 1, 2, 3, 4, 5, 6, 7" in text
    env.step("`4`")
    assert env.rewards == {"player_0": 1.0, "player_1": -1.0}
    env.close()


def test_classic_chess_reads_uci_and_san_and_ends_in_mate():
    module = module_or_skip("classic_v0")
    env = module.env(game="chess_v6")
    env.reset()
    play(env, "f2f3", "I answer e5", "Move: g4")
    assert env.infos["player_1"]["legal_moves"] and "d8h4" in env.infos["player_1"]["legal_moves"]
    env.step("Qh4#")  # fool's mate
    assert env.rewards == {"player_0": -1.0, "player_1": 1.0}
    assert env.infos["player_1"]["outcome"] == "win"
    env.close()


def test_classic_illegal_moves_never_reach_the_inner_game():
    module = module_or_skip("classic_v0")
    env = module.env(game="chess_v6")
    env.reset()
    env.step("e2e5")
    assert "Invalid move: `e2e5` is not one of the legal moves" in env.observe("player_0")["text"]
    env.step("Ke2")
    assert env.rewards == {"player_0": -1.5, "player_1": 0.5}
    env.close()


def test_classic_plays_other_discrete_games_with_numbered_moves():
    module_or_skip("classic_v0")
    from rllm_envs.multiagent.classic import ClassicTextEnv

    env = ClassicTextEnv(game="rps_v2")
    env.reset(seed=0)
    assert env.infos[env.agent_selection]["legal_moves"] == ["0", "1", "2"]
    env.close()


def test_the_steps_per_second_benchmark_runs_every_env():
    from tests.benchmark_runs import run_benchmark

    result = run_benchmark("multiagent_envs.py", "--steps=200", "--repeats=1")
    lines = result.stdout.splitlines()
    for name in ENV_MODULES:
        assert any(line.startswith(name) for line in lines), name
    assert "classic_v0 (chess_v6)" in result.stdout and "text/raw" in lines[0]
