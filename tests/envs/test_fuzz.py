"""Property-based fuzzing: 2,000 hostile actions per registered id never raise and always give
a valid 5-tuple (empty, 100 kB, Unicode, control characters, lone surrogates, non-strings)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.envs.conformance import ALL_IDS, assert_valid_step, make_env

ACTIONS_PER_ENV = 2000

# Replies that models write, so episodes also get past the first turn.
PLAUSIBLE = ["Left", "`Down`", "1", "0", "[0.5]", "\\boxed{42}", "Action: Up", "</think>2"]

hostile_actions = st.one_of(
    st.just(""),
    st.text(max_size=50),
    st.text(st.characters(categories=["Cc", "Zs", "Zl", "Zp"]), max_size=50),
    st.text(st.characters(categories=["Cs", "Co", "Cn", "So"]), max_size=20),  # lone surrogates
    st.builds(lambda char: char * 100_000, st.characters()),  # 100 kB replies
    st.sampled_from(PLAUSIBLE),
    st.builds(lambda text, noise: text + noise, st.sampled_from(PLAUSIBLE), st.text(max_size=10)),
    st.binary(max_size=50),
    st.integers(),
    st.floats(),
    st.none(),
    st.lists(st.integers(), max_size=4),
)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ALL_IDS)
def test_hostile_actions_never_raise(env_id):
    # One instance for all examples (containers and browsers are costly to start); it is
    # reset whenever an episode ends, so every action meets a running episode or a fresh one.
    env = make_env(env_id)
    seeds = itertools.count()
    state = {"sent": 0, "episode_over": True}

    @settings(
        max_examples=ACTIONS_PER_ENV,
        deadline=None,
        derandomize=True,  # the same actions on every run: CI failures reproduce
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(action=hostile_actions)
    def step_once(action):
        if state["episode_over"]:
            env.reset(seed=next(seeds))
        result = env.step(action)
        assert_valid_step(env, result)
        state["episode_over"] = result[2] or result[3]
        state["sent"] += 1

    try:
        step_once()
    finally:
        env.close()
    assert state["sent"] >= ACTIONS_PER_ENV
