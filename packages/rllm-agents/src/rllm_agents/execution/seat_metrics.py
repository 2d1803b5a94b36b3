"""Episode-level metrics of multi-agent runs: per seat and per policy, with Wilson intervals.

Each episode of a multi-agent workflow names, per seat, the policy that played it, its reward,
its outcome (``win`` | ``draw`` | ``loss`` in competitive games) and whether it was correct
(where the env says). This sums them up by seat and by policy, and counts failures by kind.
Failed episodes (errors, timeouts, env failures) have no outcome: they are counted as failures,
never as losses.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from rllm_agents.types import Episode, TerminationReason, Trajectory

_FAILED = (TerminationReason.ERROR, TerminationReason.TIMEOUT, TerminationReason.ENV_FAILURE)


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95 % for z = 1.96); (0, 1) with no trials.

    Unlike the normal approximation it stays inside [0, 1] and is sound for small counts and
    rates near 0 or 1, which is what evaluations of a few dozen games give.
    """
    if trials <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    rate = successes / trials
    denominator = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def succeeded(trajectory: Trajectory) -> bool:
    """A seat's success: a win where the game has outcomes, else the env's ``is_correct``,
    else a positive reward."""
    outcome = trajectory.info.get("outcome")
    if outcome is not None:
        return outcome == "win"
    if trajectory.info.get("is_correct") is not None:
        return bool(trajectory.info["is_correct"])
    return trajectory.reward > 0


def _tally(trajectories: list[Trajectory]) -> dict[str, Any]:
    count = len(trajectories)
    outcomes = Counter(t.info["outcome"] for t in trajectories if t.info.get("outcome"))
    decided = sum(outcomes.values())
    successes = sum(map(succeeded, trajectories))
    tally: dict[str, Any] = {
        "seats_played": count,
        "mean_reward": sum(t.reward for t in trajectories) / count if count else 0.0,
        "success_rate": successes / count if count else 0.0,
        "success_rate_ci": list(wilson_interval(successes, count)),
        "invalid_moves": sum(int(t.info.get("invalid_moves", 0)) for t in trajectories),
        "forfeits": sum(
            1
            for t in trajectories
            if t.info.get("end_reason") == "forfeit" and t.info.get("outcome") == "loss"
        ),
    }
    if decided:
        wins, draws = outcomes.get("win", 0), outcomes.get("draw", 0)
        tally.update(
            wins=wins,
            draws=draws,
            losses=outcomes.get("loss", 0),
            win_rate=wins / decided,
            win_rate_ci=list(wilson_interval(wins, decided)),
            score=(wins + 0.5 * draws) / decided,  # a draw counts half, as in chess
        )
    return tally


def failure_kinds(episodes: Iterable[Episode]) -> dict[str, int]:
    """Failed episodes by kind: ``error``, ``timeout``, ``env_failure:<kind>``."""
    kinds: Counter[str] = Counter()
    for episode in episodes:
        reason = episode.termination_reason
        if reason == TerminationReason.ENV_FAILURE:
            kinds[f"env_failure:{episode.failure or 'unknown'}"] += 1
        elif reason in _FAILED:
            kinds[reason.value] += 1
    return dict(sorted(kinds.items()))


def summarize_seats(episodes: list[Episode]) -> dict[str, Any]:
    """Per-seat and per-policy results of the episodes that finished, and failures by kind."""
    finished = [e for e in episodes if e.termination_reason not in _FAILED]
    by_seat: dict[str, list[Trajectory]] = defaultdict(list)
    by_policy: dict[str, list[Trajectory]] = defaultdict(list)
    by_role: dict[str, list[Trajectory]] = defaultdict(list)
    for episode in finished:
        for trajectory in episode.trajectories:
            by_seat[trajectory.name].append(trajectory)
            by_policy[str(trajectory.info.get("policy", "unknown"))].append(trajectory)
            by_role[str(trajectory.info.get("role", trajectory.name))].append(trajectory)
    return {
        "finished_episodes": len(finished),
        "seats": {seat: _tally(group) for seat, group in sorted(by_seat.items())},
        "roles": {role: _tally(group) for role, group in sorted(by_role.items())},
        "policies": {name: _tally(group) for name, group in sorted(by_policy.items())},
        "failures": failure_kinds(episodes),
    }
