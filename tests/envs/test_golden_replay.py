"""Golden trajectories: a recorded episode of every shipped env replays with no difference.

Each file in tests/envs/golden was recorded by tests/envs/golden/record.py (a few scripted
steps, no model). Replaying it plays the recorded actions against today's env: any change in
an observation, a reward or an episode end fails here, naming the step. A change made on
purpose is recorded again with that script (and, for rewards or tasks, a version bump).
"""

from __future__ import annotations

import pytest
from rllm_agents.episodes import read_episodes, replay_episodes
from rllm_envs import ENV_IDS
from rllm_envs.multiagent import ENV_MODULES

from tests.envs.golden.record import ALL_NAMES, golden_path
from tests.parts import require_part

GOLDEN = (*ENV_IDS, *ENV_MODULES)
# Envs whose file is recorded where their part runs (SWE needs Docker).
RECORDED_WITH_PART = {"rllm/SWE-v0": "Docker", "rllm/Harbor-v0": "Docker"}


def replay_golden(name: str):
    path = golden_path(name)
    if not path.is_file():
        part = RECORDED_WITH_PART.get(name)
        require_part(
            part is None,
            f"{path.name} is not recorded yet: run python -m tests.envs.golden.record {name} "
            f"where {part} runs",
        )
        pytest.fail(f"{path} is missing: python -m tests.envs.golden.record {name}")
    [result] = replay_episodes(read_episodes(path))
    if result.skipped:  # the env cannot be made here (a missing extra, browser, server)
        require_part(False, f"{name} cannot replay here: {result.skipped}")
    return result


def test_every_shipped_env_has_a_golden_script():
    assert set(GOLDEN) == set(ALL_NAMES)


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_trajectory_replays_unchanged(name):
    result = replay_golden(name)
    assert result.steps >= 1
    assert result.identical, "\n".join(diff.describe() for diff in result.diffs)


def test_a_changed_env_rule_fails_its_replay(monkeypatch):
    # Arithmetic now wants a + b + 1: the recorded right answer earns nothing.
    from rllm_envs.arithmetic import env as arithmetic

    original = arithmetic.last_integer
    monkeypatch.setattr(arithmetic, "last_integer", lambda text: str(int(original(text)) - 1))
    result = replay_golden("rllm/Arithmetic-v0")
    changed = {diff.what: diff for diff in result.diffs}
    assert set(changed) == {"observation", "reward"}
    assert changed["reward"].step == 1
    assert (changed["reward"].recorded, changed["reward"].replayed) == (1.0, 0.0)
    assert "Wrong" in changed["observation"].replayed


def test_a_changed_game_rule_fails_the_multiagent_replay(monkeypatch):
    # A win now scores half a point: the last cycle's rewards differ, nothing before it.
    from rllm_envs.multiagent.tictactoe import game

    scored = game.TicTacToe.returns
    monkeypatch.setattr(
        game.TicTacToe, "returns", lambda self: {p: r / 2 for p, r in scored(self).items()}
    )
    result = replay_golden("tictactoe_v0")
    assert {diff.what for diff in result.diffs} == {"reward"}
    [diff] = result.diffs
    assert diff.step == len(next(read_episodes(golden_path("tictactoe_v0"))).env.transitions)
    assert diff.recorded == {"player_0": 1, "player_1": -1}
