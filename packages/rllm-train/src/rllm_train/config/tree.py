"""``rollout.tree``: tree-structured GRPO in the native trainer (``rllm_train.native.tree``).

Each task of a step is played once, as a trunk, up to a branch turn; the env is snapshotted
there and ``rollout.n`` continuations are played from that same state and conversation. The
continuations of one snapshot are one GRPO (or RLOO) group. See docs/training/tree-grpo.md.

Only plain-Python checks of the config live here; whether the env can be snapshotted is checked
on a real env before the run folder is claimed (``rllm_train.native.tree.check_tree_env``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rllm_train.config import TrainConfig


@dataclass
class TreeConfig:
    enabled: bool = False
    # The turn after which each trunk is snapshotted and branched (1 = after the first move;
    # 0 = from the reset, a plain GRPO group); several values are cycled over the step's tasks,
    # so that every depth gets trained (turns before the branch are context, never trained).
    # Each must be below rollout.max_turns, so that the branches have a turn left to play.
    branch_turns: list[int] = field(default_factory=lambda: [1])


def tree_problems(config: TrainConfig) -> list[str]:
    """What is wrong with ``rollout.tree`` in `config` (empty: nothing, or it is off)."""
    tree, rollout = config.rollout.tree, config.rollout
    if not tree.enabled:
        return []
    key = "rollout.tree.enabled"
    from rllm_train.run.algorithm import algorithm, names_where

    # Algorithms whose baseline is the group's own samples: the branch group is what they compare.
    group_algorithms = names_where(lambda entry: entry.compares_group and entry.runs_on("native"))
    refusals = {
        rollout.mode != "sync" or rollout.engine not in ("local", "auto"): (
            f"{key}: branches are played from snapshots taken during the same step, by the "
            "trained model itself; use rollout.mode=sync and rollout.engine=local"
        ),
        rollout.executor != "inline": (
            f"{key}: snapshots live in the trainer's process, where the branches are played; "
            "use rollout.executor=inline"
        ),
        config.program.given: (
            f"{key}: an agent program plays whole episodes behind the gateway, and cannot be "
            "resumed from a snapshot; tree rollouts need a BaseAgent (leave program empty)"
        ),
        not algorithm(config.algorithm.name).compares_group: (
            f"{key}: the branches of a snapshot form a group, which only a group baseline "
            f"uses; use algorithm.name={' or '.join(group_algorithms)}, "
            f"not {config.algorithm.name}"
        ),
        # 0 (the env's own limit) is checked again once the run's setup has worked it out.
        0 < rollout.max_turns < 2: (
            f"{key}: branching needs multi-turn episodes (rollout.max_turns of 2 or more, "
            f"got {rollout.max_turns})"
        ),
    }
    problems = [message for refused, message in refusals.items() if refused]
    if problems:
        return problems
    turns, limit = tree.branch_turns, rollout.max_turns or float("inf")
    if not turns or any(
        isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn < limit
        for turn in turns
    ):
        problems.append(
            f"rollout.tree.branch_turns: each must be a turn from 0 (the reset) to "
            f"rollout.max_turns - 1 ({rollout.max_turns - 1}), got {turns}"
        )
    return problems
