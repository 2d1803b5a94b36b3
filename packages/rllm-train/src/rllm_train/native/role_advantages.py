"""Role-conditioned advantage estimation (RAE), as SPIRAL trains self-play with it.

One running baseline per role: an exponential moving average of the role's rewards, decay
``decay`` (0.95 by default), starting at 0. A trajectory's advantage is its reward minus its
role's baseline *before* the baseline takes that reward in, so the baseline never contains the
sample it is subtracted from (an unbiased estimate). Trajectories are taken in order, one
baseline update each, and every model token of a trajectory gets its advantage (no
normalisation by the batch's spread).

Why per role: in a zero-sum game the mean reward over both seats is about 0, and the seat that
moves first usually wins more. A baseline pooled over seats would credit every first-mover
reply and blame every second-mover reply for the seat, not for the reply. One baseline per
role compares a reply with what that role usually gets. It needs no group of samples of the
same task (``rollout.n=1`` works), unlike GRPO.

A role's key is ``"<env>:<role>"`` (:func:`role_key`), the env's ``info["role"]`` where it has
one, else the trajectory's name; so a single-agent env has one baseline, an env of two seats
two, and solver-judge one for its solvers and one for its judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rllm_agents.types import Trajectory

DEFAULT_DECAY = 0.95


def role_of(trajectory: Trajectory) -> str:
    """The trajectory's role: the env's ``info["role"]``, else its name (the seat)."""
    return str(trajectory.info.get("role") or trajectory.name)


def role_key(env_id: str, trajectory: Trajectory) -> str:
    return f"{env_id}:{role_of(trajectory)}"


def rae_advantages(
    rewards: Sequence[float],
    keys: Sequence[str],
    baselines: Mapping[str, float],
    decay: float = DEFAULT_DECAY,
) -> tuple[list[float], dict[str, float]]:
    """(advantage of each reward, the baselines after taking them all in), in order.

    ``advantage_i = reward_i - b[key_i]``, then ``b[key_i] = decay * b[key_i] + (1 - decay) *
    reward_i``; a key not in `baselines` starts at 0. `baselines` itself is left as it is.
    """
    if len(rewards) != len(keys):
        raise ValueError(f"{len(rewards)} rewards but {len(keys)} role keys")
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"decay must be in [0, 1), got {decay}")
    updated = dict(baselines)
    advantages = []
    for reward, key in zip(rewards, keys, strict=True):
        baseline = updated.get(key, 0.0)
        advantages.append(float(reward) - baseline)
        updated[key] = decay * baseline + (1.0 - decay) * float(reward)
    return advantages, updated


@dataclass
class RoleBaselines:
    """The run's running baselines (saved in checkpoints, so a resumed run goes on with them)."""

    decay: float = DEFAULT_DECAY
    values: dict[str, float] = field(default_factory=dict)

    def advantages(self, rewards: Sequence[float], keys: Sequence[str]) -> list[float]:
        """Each reward's advantage; the baselines move on past these rewards."""
        advantages, self.values = rae_advantages(rewards, keys, self.values, self.decay)
        return advantages

    def trajectory_advantages(self, env_id: str, pairs: Sequence[tuple[Trajectory, str]]):
        """The advantage of each (trained trajectory, group) pair, by the trajectory's role."""
        return self.advantages(
            [trajectory.reward for trajectory, _ in pairs],
            [role_key(env_id, trajectory) for trajectory, _ in pairs],
        )

    def metrics(self) -> dict[str, float]:
        return {f"rae_baseline/{key}": value for key, value in self.values.items()}
