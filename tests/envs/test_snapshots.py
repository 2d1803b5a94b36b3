"""Env snapshots: restore gives identical steps for the same actions, fork gives independent
copies, wrappers come along, and the envs that cannot be captured say why."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import rllm_envs  # noqa: F401  (registers the rllm/ ids)
from rllm_envs import SnapshotUnsupported, TaskSet, TextEnv, Transition
from rllm_envs.core.snapshots import fork, release, restore, snapshot

from tests.envs import uncopyable_env
from tests.parts import require_module

LAKE_MOVES = ["Down", "Right", "Down", "Right", "Up", "Left", "Down", "Down", "Right", "Right"]


def play(env: gym.Env, actions) -> list[tuple]:
    """Every step's (observation, reward, terminated, truncated, info), as plain values."""
    return [_plain(env.step(action)) for action in actions]


def _plain(value):
    if isinstance(value, tuple | list):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return value


def lake(**kwargs) -> gym.Env:
    env = gym.make("rllm/FrozenLake-v0", size=6, p=0.9, **kwargs)
    env.reset(seed=11)
    return env


@pytest.mark.parametrize("slippery", [False, True], ids=["solid", "slippery"])
def test_frozenlake_restore_replays_the_same_steps(slippery):
    env = lake(is_slippery=slippery)
    play(env, ["Down", "Right"])
    snap = snapshot(env)
    first = play(env, LAKE_MOVES)
    restore(env, snap)
    assert play(env, LAKE_MOVES) == first
    restore(env, snap)  # a snapshot is not used up: a second restore plays the same again
    assert play(env, LAKE_MOVES) == first
    if slippery:
        # The slips come from np_random, which the snapshot carries: restoring the board alone
        # would not give these same slides.
        assert any("slipped" in observation for observation, *_ in first)
    env.close()


def test_fork_gives_independent_envs_that_continue_alike_and_leaves_the_original():
    env = lake(is_slippery=True)
    play(env, ["Right"])
    forks = fork(env, 3)
    assert len(forks) == 3 and len({id(f.unwrapped) for f in forks}) == 3
    expected = play(env, LAKE_MOVES)  # the original still stands where it was forked
    play(forks[0], ["Up", "Up", "Left"])  # one fork moving on does not move the others
    assert play(forks[1], LAKE_MOVES) == expected
    assert play(forks[2], LAKE_MOVES) == expected
    for made in (env, *forks):
        made.close()


def test_wrappers_come_along_time_limit_included():
    env = lake(max_episode_steps=5)
    play(env, ["Right", "Left", "Right"])
    snap = snapshot(env)
    assert snap.wrappers["0:TimeLimit"]["_elapsed_steps"] == 3
    first = play(env, ["Left", "Right"])
    assert first[-1][3] is True  # the fifth step: TimeLimit truncates
    restore(env, snap)
    assert play(env, ["Left", "Right"]) == first
    # A fork is made by gym.make from the spec, TimeLimit included, and counts on from 3.
    [forked] = fork(env, 1)
    restore(forked, snap)
    assert play(forked, ["Left", "Right"]) == first
    with pytest.raises(ValueError, match="wrappers"):
        restore(env.unwrapped, snap)  # a bare env has no TimeLimit to put the count in
    # The bare env has methods of its own, and a snapshot of it restores bare envs.
    bare = env.unwrapped
    bare_snap = bare.snapshot()
    after = play(bare, ["Down"])
    bare.restore(bare_snap)
    assert play(bare, ["Down"]) == after
    env.close()
    forked.close()


def test_snapshots_pickle_and_restore_in_another_env_of_the_same_id():
    env = lake(is_slippery=True)
    play(env, ["Down"])
    snap = pickle.loads(pickle.dumps(snapshot(env)))
    other = gym.make("rllm/FrozenLake-v0", size=6, p=0.9, is_slippery=True)
    restore(other, snap)  # never reset: restore alone puts it mid-episode
    assert play(other, LAKE_MOVES) == play(env, LAKE_MOVES)
    with pytest.raises(ValueError, match="Arithmetic"):
        restore(gym.make("rllm/Arithmetic-v0"), snap)
    release(snap)
    release(snap)  # idempotent
    with pytest.raises(ValueError, match="released"):
        restore(other, snap)


def test_math_arithmetic_and_open_ended_prompts_restore_the_episode():
    require_module("math_verify", "rllm/Math-v0 needs the math extra")
    math = gym.make("rllm/Math-v0", max_turns=3)
    math.reset(options={"task": {"question": "What is 6 * 7?", "answer": "42"}})
    play(math, [r"\boxed{41}"])
    snap = snapshot(math)
    replies = [r"\boxed{40}", r"It is \boxed{42}"]
    first = play(math, replies)
    assert first[-1][1:3] == (1.0, True) and first[-1][4]["turn"] == 3
    restore(math, snap)
    assert play(math, replies) == first
    math.close()

    arithmetic = gym.make("rllm/Arithmetic-v0")
    arithmetic.reset(seed=4)
    snap = snapshot(arithmetic)
    answered = play(arithmetic, ["7", "7"])  # the second reply meets an ended episode
    assert answered[1][3] is True and "ended" in answered[1][0]
    restore(arithmetic, snap)  # back before the answer: the episode is open again
    assert play(arithmetic, ["7", "7"]) == answered

    prompts = gym.make("rllm/OpenEnded-v0")
    prompts.reset(seed=2)
    snap = snapshot(prompts)
    replied = play(prompts, ["A short answer.", "More."])
    assert replied[0][2] is True and "ended" in replied[1][0]
    restore(prompts, snap)
    assert play(prompts, ["A short answer.", "More."]) == replied


@pytest.mark.parametrize(
    ("env_id", "kwargs", "actions"),
    [
        ("CartPole-v1", {}, ["1", "0", "0", "1", "1", "0"]),
        # Gymnasium's own FrozenLake slips with the inner env's np_random.
        ("FrozenLake-v1", {"is_slippery": True, "show_ansi": True}, ["2", "1", "2", "1", "1"]),
    ],
    ids=["cartpole", "toy-text-frozenlake"],
)
def test_gymtext_restores_the_inner_env(env_id, kwargs, actions):
    env = gym.make("rllm/GymText-v0", env_id=env_id, **kwargs)
    env.reset(seed=5)
    play(env, actions[:1])
    snap = snapshot(env)
    first = play(env, actions)
    restore(env, snap)
    assert play(env, actions) == first
    restore(env, snap)
    [forked] = fork(env, 1)
    assert play(forked, actions) == play(env, actions) == first
    env.close()
    forked.close()


def test_envs_that_cannot_be_captured_refuse_with_the_reason():
    text = gym.make("rllm/GymText-v0", env_id=uncopyable_env.ENV_ID)
    text.reset(seed=0)
    with pytest.raises(SnapshotUnsupported, match=r"GymText over rllm_tests/Simulator-v0.*socket"):
        snapshot(text)
    with pytest.raises(SnapshotUnsupported, match="cannot be copied"):
        fork(text, 2)
    assert play(text, ["1"])[0][0].endswith("Observation: 1")  # the refusal changed nothing
    text.close()
    with pytest.raises(SnapshotUnsupported, match="CartPoleEnv is not an rllm text env"):
        snapshot(gym.make("CartPole-v1"))


def test_mcp_refuses_naming_its_tool_server():
    require_module("mcp", "rllm/MCP-v0 needs the mcp extra")
    from rllm_envs.mcp import MCPEnv

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    env = MCPEnv({"calculator": {"functions": [add]}}, [{"question": "2 + 3?", "answer": "5"}])
    try:
        env.reset(seed=0)
        with pytest.raises(SnapshotUnsupported, match=r"MCPEnv .*'calculator'.*outside"):
            env.snapshot()
    finally:
        env.close()


class NotebookEnv(TextEnv):
    """Keeps its episode in a file on disk, as envs with a workspace outside Python do: a
    snapshot is a copy of the file, which release deletes."""

    def __init__(self, folder: str):
        super().__init__(TaskSet("notes", ({"task_id": "notes"},)), max_turns=10)
        self.folder = Path(folder)
        self.page = self.folder / f"page-{id(self)}.txt"

    def begin(self, task):
        self.page.write_text("")
        return "Write notes.", {}

    def act(self, action):
        with self.page.open("a") as page:
            page.write(action + "\n")
        return Transition(self.page.read_text(), reward=float(len(action)))

    def capture_state(self):
        copy = self.folder / f"snapshot-{len(list(self.folder.glob('snapshot-*')))}.txt"
        shutil.copy(self.page, copy)
        return str(copy)

    def restore_state(self, state):
        shutil.copy(state, self.page)

    @staticmethod
    def release_state(state):
        Path(state).unlink(missing_ok=True)


NOTEBOOK_ID = "rllm_tests/Notebook-v0"
if NOTEBOOK_ID not in gym.registry:
    gym.register(NOTEBOOK_ID, entry_point=NotebookEnv)


def test_release_frees_what_a_snapshot_holds_outside_python(tmp_path):
    env = gym.make(NOTEBOOK_ID, folder=str(tmp_path))
    env.reset(seed=0)
    play(env, ["first"])
    snap = snapshot(env)
    [held] = tmp_path.glob("snapshot-*")
    first = play(env, ["second", "third"])
    restore(env, snap)
    assert play(env, ["second", "third"]) == first
    forks = fork(env, 2)  # fork takes a snapshot of its own and releases it once restored
    assert list(tmp_path.glob("snapshot-*")) == [held]
    assert [play(made, ["x"]) for made in forks] == [play(env, ["x"])] * 2
    release(snap)
    release(snap)  # idempotent
    assert not held.exists()
    with pytest.raises(ValueError, match="released"):
        restore(env, snap)
    with pytest.raises(TypeError, match="must be a @staticmethod"):

        class Careless(NotebookEnv):
            def release_state(self, state):  # would need the env, which may be gone
                pass
