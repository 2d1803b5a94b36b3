"""Pure solvers for FrozenLake maps: shortest paths (BFS) and the policy that reaches the goal
most often on slippery ice (value iteration over Gymnasium's transition model)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from rllm_envs.frozenlake.board import Position

LEFT, DOWN, RIGHT, UP = range(4)
MOVE_NAMES = ("Left", "Down", "Right", "Up")
STEPS: dict[int, Position] = {LEFT: (0, -1), DOWN: (1, 0), RIGHT: (0, 1), UP: (-1, 0)}
# Gymnasium's slippery ice: the chosen move or one of the two perpendicular ones, 1/3 each.
SLIP_SUCCESS = 1.0 / 3.0


def move(rows: Sequence[str], position: Position, action: int) -> Position:
    """Where `action` takes the player on solid ice; the edge of the lake stops the player."""
    size = len(rows)
    d_row, d_col = STEPS[action]
    return (
        min(max(position[0] + d_row, 0), size - 1),
        min(max(position[1] + d_col, 0), size - 1),
    )


def shortest_path(rows: Sequence[str], start: Position = (0, 0)) -> list[int] | None:
    """The fewest moves from `start` to G avoiding holes (non-slippery), or None if none exists."""
    goal = (len(rows) - 1, len(rows) - 1)
    came_from: dict[Position, tuple[Position, int] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        here = frontier.popleft()
        if here == goal:
            actions = []
            while came_from[here] is not None:
                here, action = came_from[here]  # type: ignore[misc]
                actions.append(action)
            return actions[::-1]
        for action in STEPS:
            there = move(rows, here, action)
            if there not in came_from and rows[there[0]][there[1]] != "H":
                came_from[there] = (here, action)
                frontier.append(there)
    return None


def best_policy(rows: Sequence[str], slippery: bool, sweeps: int = 1000) -> np.ndarray:
    """An array [row, col] -> action maximising the chance of reaching G.

    On solid ice this is a shortest path from every tile; on slippery ice it is value
    iteration on the probability of reaching the goal (no discount: only success counts).
    """
    size = len(rows)
    if not slippery:
        policy = np.full((size, size), DOWN, dtype=np.int64)
        for row in range(size):
            for col in range(size):
                path = shortest_path(rows, (row, col)) if rows[row][col] not in "HG" else None
                if path:
                    policy[row, col] = path[0]
        return policy
    value = np.zeros((size, size))
    value[size - 1, size - 1] = 1.0
    outcomes = {
        (row, col, action): [move(rows, (row, col), slip) for slip in _slips(action)]
        for row in range(size)
        for col in range(size)
        for action in STEPS
    }
    for _ in range(sweeps):
        action_values = _action_values(rows, value, outcomes)
        new_value = action_values.max(axis=2)
        new_value[size - 1, size - 1] = 1.0
        for row in range(size):
            for col in range(size):
                if rows[row][col] == "H":
                    new_value[row, col] = 0.0
        if np.abs(new_value - value).max() < 1e-10:
            value = new_value
            break
        value = new_value
    return _action_values(rows, value, outcomes).argmax(axis=2)


def _slips(action: int) -> tuple[int, int, int]:
    return ((action - 1) % 4, action, (action + 1) % 4)


def _action_values(rows, value, outcomes) -> np.ndarray:
    size = len(rows)
    result = np.zeros((size, size, 4))
    for (row, col, action), targets in outcomes.items():
        result[row, col, action] = SLIP_SUCCESS * sum(value[r, c] for r, c in targets)
    return result
