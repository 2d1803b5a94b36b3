"""Lake maps: seeded generation, validation, and the text rendering the agent reads.

A map is a tuple of equal-length strings over ``S F H G`` (Gymnasium's FrozenLake letters);
the start is the top-left corner and the goal the bottom-right one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gymnasium.utils import seeding

TILES = frozenset("SFHG")
PLAYER = "P"
MIN_SIZE, MAX_SIZE = 2, 16
# Below one half, most random boards have no path and generation retries for a long time
# (seconds on a 16x16 board); the bound keeps every reset fast.
MIN_FROZEN_PROBABILITY = 0.5

Position = tuple[int, int]


@dataclass(frozen=True)
class LakeSpec:
    """Everything that defines an episode's lake."""

    seed: int
    size: int
    p: float
    slippery: bool


def check_spec(spec: LakeSpec) -> None:
    if not isinstance(spec.size, int) or not MIN_SIZE <= spec.size <= MAX_SIZE:
        raise ValueError(
            f"FrozenLake size must be an int in [{MIN_SIZE}, {MAX_SIZE}], got {spec.size!r}"
        )
    if not MIN_FROZEN_PROBABILITY <= spec.p <= 1.0:
        raise ValueError(
            f"FrozenLake p (frozen-tile probability) must be in [{MIN_FROZEN_PROBABILITY}, 1], "
            f"got {spec.p!r}"
        )
    if not isinstance(spec.seed, int) or spec.seed < 0:
        raise ValueError(f"FrozenLake seed must be a non-negative int, got {spec.seed!r}")


def generate_map(spec: LakeSpec) -> tuple[str, ...]:
    """The map a spec stands for: the same seed, size and p always give the same solvable map.

    It is the map Gymnasium's ``generate_random_map(size, p, seed)`` returns - the same draws
    from the same generator, redrawn until S reaches G - with the path check done on plain
    strings, which is several times faster than Gymnasium's walk over a numpy array of letters.
    """
    check_spec(spec)
    rng, _ = seeding.np_random(spec.seed)
    frozen = min(1.0, spec.p)
    while True:
        holes = rng.choice(2, (spec.size, spec.size), p=[frozen, 1 - frozen])
        tiles = ["".join("H" if hole else "F" for hole in row) for row in holes.tolist()]
        tiles[0] = "S" + tiles[0][1:]
        tiles[-1] = tiles[-1][:-1] + "G"
        if reachable_goal(tiles):
            return tuple(tiles)


def check_map(rows: Sequence[str]) -> tuple[str, ...]:
    """Validate an explicit map; return it as a tuple. Raises ValueError saying what is wrong."""
    if isinstance(rows, str) or not rows or not all(isinstance(row, str) for row in rows):
        raise ValueError("a FrozenLake map is a non-empty list of strings, e.g. ['SF', 'FG']")
    rows = tuple(rows)
    size = len(rows)
    if any(len(row) != size for row in rows) or not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"a FrozenLake map must be square, {MIN_SIZE} to {MAX_SIZE} tiles a side")
    if not set("".join(rows)) <= TILES:
        raise ValueError(f"a FrozenLake map uses only the letters {sorted(TILES)}")
    if rows[0][0] != "S" or rows[-1][-1] != "G" or "".join(rows).count("S") != 1:
        raise ValueError("a FrozenLake map has one S at the top-left and a G at the bottom-right")
    if not reachable_goal(rows):
        raise ValueError("this FrozenLake map has no path from S to G")
    return rows


def reachable_goal(rows: Sequence[str]) -> bool:
    """Whether a walk over non-hole tiles leads from the top-left corner to the bottom-right."""
    size = len(rows)
    goal = (size - 1, size - 1)
    seen = {(0, 0)}
    frontier = [(0, 0)]
    while frontier:
        row, col = frontier.pop()
        for next_tile in ((row + 1, col), (row, col + 1), (row - 1, col), (row, col - 1)):
            r, c = next_tile
            if 0 <= r < size and 0 <= c < size and next_tile not in seen and rows[r][c] != "H":
                if next_tile == goal:
                    return True
                seen.add(next_tile)
                frontier.append(next_tile)
    return False


def render_board(rows: Sequence[str], player: Position | None) -> str:
    """Tiles separated by spaces, one row a line, the player shown as P."""
    lines = []
    for row_index, row in enumerate(rows):
        tiles = list(row)
        if player is not None and player[0] == row_index:
            tiles[player[1]] = PLAYER
        lines.append(" ".join(tiles))
    return "\n".join(lines)


def parse_board(text: str) -> tuple[tuple[str, ...], Position | None]:
    """Read the last board in an observation back: (map, player position).

    The tile under the player is not shown; it is the start or frozen ice (the episode ends on
    a hole or the goal), and either is safe, so it reads back as F unless it is the corner S.
    """
    block: list[str] = []
    last_block: list[str] = []
    for line in text.splitlines():
        tokens = line.split(" ")
        if tokens and all(len(t) == 1 and t in TILES | {PLAYER} for t in tokens):
            block.append("".join(tokens))
        else:
            if block:
                last_block = block
            block = []
    last_block = block or last_block
    if not last_block:
        raise ValueError("no FrozenLake board found in the text")
    player = None
    rows = []
    for row_index, row in enumerate(last_block):
        column = row.find(PLAYER)
        if column >= 0:
            player = (row_index, column)
            row = row.replace(PLAYER, "S" if (row_index, column) == (0, 0) else "F")
        rows.append(row)
    return tuple(rows), player
