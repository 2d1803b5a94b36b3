"""Gymnasium FrozenLake-v1's transition rule, computed one step at a time.

Gymnasium's ``FrozenLakeEnv`` builds its whole transition table when it is made (about half a
millisecond for a 4x4 lake, more for larger ones), and every task here is a different lake, so
building it dominated a reset. :class:`Lake` applies the same rule directly: the same moves,
rewards and episode ends, and the same draws from the generator - one per reset and one per
step, slippery or not, chosen against the same cumulative probabilities - so a seeded episode
is the one Gymnasium would play (``tests/envs/test_frozenlake.py`` checks it step by step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rllm_envs.frozenlake.board import Position
from rllm_envs.frozenlake.solver import SLIP_SUCCESS, move

# Gymnasium's slippery outcomes, in its order: (a - 1) % 4, a, (a + 1) % 4. It picks one with
# argmax(cumsum(p) > u) for a uniform draw u; the thresholds are that cumsum, computed the same
# way so that floating-point rounding agrees too.
_SLIP_FAIL = (1.0 - SLIP_SUCCESS) / 2.0
SLIP_THRESHOLDS = tuple(float(x) for x in np.cumsum([_SLIP_FAIL, SLIP_SUCCESS, _SLIP_FAIL]))
SLIP_TURNS = (-1, 0, 1)


@dataclass
class Lake:
    """One lake map and the player's position on it."""

    rows: tuple[str, ...]
    slippery: bool
    position: Position = (0, 0)

    def reset(self, rng: np.random.Generator) -> Position:
        # Gymnasium samples the start from its initial distribution (all mass on S): one draw.
        rng.random()
        self.position = (0, 0)
        return self.position

    def step(self, action: int, rng: np.random.Generator) -> tuple[Position, float, bool]:
        """(new position, reward, terminated) for one move from a non-terminal tile."""
        draw = rng.random()  # drawn on solid ice as well, as Gymnasium does
        if self.slippery:
            # argmax of an all-False row is 0, hence the default.
            slip = next((i for i, limit in enumerate(SLIP_THRESHOLDS) if limit > draw), 0)
            action = (action + SLIP_TURNS[slip]) % 4
        self.position = move(self.rows, self.position, action)
        tile = self.rows[self.position[0]][self.position[1]]
        return self.position, float(tile == "G"), tile in "GH"
