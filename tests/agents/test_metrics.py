"""Unbiased pass@k and run summaries."""

from __future__ import annotations

import itertools
import math

import pytest
from rllm_agents.metrics import (
    outcome_of,
    pass_at_k,
    pass_at_k_by_task,
    pass_ks,
    summarize_episodes,
)
from rllm_agents.types import Episode, Step, TerminationReason, Trajectory


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of all k-subsets of n samples (c correct) that hold a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(any(subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 0, 1), (5, 2, 1), (6, 2, 3), (8, 3, 8), (7, 6, 2)])
def test_pass_at_k_matches_counting_subsets(n, c, k):
    assert math.isclose(pass_at_k(n, c, k), brute_force_pass_at_k(n, c, k))


def test_pass_at_1_is_the_success_rate_and_bad_input_raises():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def episode(key: str, reward: float, correct: bool | None = None) -> Episode:
    return Episode(
        id=key,
        trajectories=[Trajectory(reward=reward)],
        is_correct=correct,
        termination_reason=TerminationReason.ENV_DONE,
        metrics={"completion_tokens": 10.0, "llm_time": 0.5},
        info={"task_key": key},
    )


def test_summary_groups_samples_by_task():
    episodes = [episode("a", 1.0, True), episode("a", 0.0, False)]
    episodes += [episode("b", 0.0, False), episode("b", 0.0, False)]
    summary = summarize_episodes(episodes, samples_per_task=2)
    assert summary["tasks"] == 2
    assert summary["mean_reward"] == 0.25
    assert summary["pass@1"] == pytest.approx(0.25)
    assert summary["pass@2"] == pytest.approx(0.5)
    assert summary["completion_tokens"] == 40.0
    assert summary["termination_reasons"] == {"env_done": 4}
    assert pass_at_k_by_task(episodes, 3) == 0.0  # no task has three samples


def test_reported_ks():
    assert pass_ks(1) == [1]
    assert pass_ks(8) == [1, 2, 4, 8]
    assert pass_ks(5) == [1, 2, 4, 5]


def ended(reason: TerminationReason | None, info: dict | None = None, **fields) -> Episode:
    step = Step(observation="o", model_response="r", action="r", info=info or {})
    return Episode(trajectories=[Trajectory(steps=[step])], termination_reason=reason, **fields)


def test_outcomes_say_why_each_episode_scored_what_it_did():
    done = TerminationReason.ENV_DONE
    cases = {
        "no_boxed_answer": ended(done, {"grade": "no_boxed_answer", "action_valid": False}),
        "correct": ended(done, {"is_correct": True}, is_correct=True),
        "wrong": ended(done, {"action_valid": True}, is_correct=False),
        "turn limit (the env's)": ended(TerminationReason.ENV_TRUNCATED, {"action_valid": True}),
        "turn limit (--max-turns)": ended(TerminationReason.MAX_TURNS),
        "timeout": ended(TerminationReason.TIMEOUT, error="took too long"),
        "env failure: sandbox_boot": ended(
            TerminationReason.ENV_FAILURE, {"failure": "sandbox_boot"}, failure="sandbox_boot"
        ),
    }
    for expected, episode in cases.items():
        assert outcome_of(episode) == expected
    summary = summarize_episodes([*cases.values(), cases["wrong"]])
    assert summary["outcomes"]["wrong"] == 2 and sum(summary["outcomes"].values()) == 8
    assert next(iter(summary["outcomes"])) == "wrong"  # the most common first
    # Of the four steps whose env said whether the action was valid, one was not.
    assert summary["invalid_action_share"] == 1 / 4
    assert summarize_episodes([ended(done)])["invalid_action_share"] is None
