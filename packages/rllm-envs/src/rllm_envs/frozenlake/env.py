"""`FrozenLakeEnv`: Gymnasium's FrozenLake dynamics, with the lake drawn and steered in text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rllm_envs.core.tasks import Row, TaskSet, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_envs.frozenlake.actions import HOW_TO_ANSWER, parse_move
from rllm_envs.frozenlake.board import (
    PLAYER,
    LakeSpec,
    Position,
    check_map,
    check_spec,
    generate_map,
)
from rllm_envs.frozenlake.dynamics import Lake
from rllm_envs.frozenlake.solver import MOVE_NAMES, move

DATA = Path(__file__).parent / "data"
RECENT_MAPS = 256
SHIPPED_SPLITS = {"train": DATA / "train.jsonl", "test": DATA / "test.jsonl"}
DEFAULTS = {"size": 4, "p": 0.8, "slippery": False}

LEGEND = "Legend: P = you, S = start, F = frozen ice (safe), H = hole (ends the episode), G = goal."
SLIPPERY_RULE = (
    "The ice is slippery: you move in the direction you choose only 1/3 of the time; "
    "otherwise you slide to one of the two directions at right angles to it."
)
OUTCOMES = {
    "G": " You reached the goal! The episode is over.",
    "H": " You fell into a hole. The episode is over.",
}
ROWS_RULE = "Rows count from the top and columns from the left, both starting at 0."


def default_max_turns(size: int, slippery: bool) -> int:
    # Enough for any shortest path (at most size*size moves) with room for mistakes;
    # slippery ice needs many retries, like Gymnasium's 100-step limit on the 4x4 lake.
    return size * size * (6 if slippery else 2)


class FrozenLakeEnv(TextEnv):
    """See the package docstring (`rllm_envs.frozenlake`) for the full contract."""

    # Steps take microseconds and touch no thread-bound resource: rllm-agents' execution
    # engine may call them on its event loop instead of paying a thread hop per step.
    metadata = {**TextEnv.metadata, "rllm.inline_safe": True}

    def __init__(
        self,
        tasks: Any = "shipped:train",
        *,
        size: int | None = None,
        p: float | None = None,
        is_slippery: bool | None = None,
        max_turns: int | None = None,
        format_penalty: float = 0.0,
        column_map: dict[str, str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        task_set = TaskSources(shipped=SHIPPED_SPLITS).load(tasks, column_map=column_map)
        super().__init__(task_set, max_turns=max_turns, render_mode=render_mode)
        self.pinned = {
            key: value
            for key, value in (("size", size), ("p", p), ("slippery", is_slippery))
            if value is not None
        }
        self.requested_max_turns = max_turns
        self.format_penalty = float(format_penalty)
        self.lake: Lake | None = None
        self.map: tuple[str, ...] = ()
        self.board_rows: list[str] = []
        self.step_texts: dict[tuple[int, Position, Position], str] = {}
        self.slippery = False
        # Tasks repeat across episodes: keep recently generated maps instead of regenerating
        # them (most of a reset's cost) every time.
        self.recent_maps: dict[LakeSpec | tuple[str, ...], tuple[str, ...]] = {}
        # Fail at make time, not at the first reset, when a pinned parameter is out of range.
        lake_spec({"seed": 0}, self.pinned)
        if max_turns is None:  # until a reset sets the lake's own: the most any task allows
            self.max_turns = max(map(self._task_turn_limit, task_set.rows), default=None)

    def _task_turn_limit(self, task: Row) -> int:
        size = len(task["map"]) if "map" in task else self.pinned.get("size", task.get("size"))
        slippery = self.pinned.get("slippery", task.get("slippery", DEFAULTS["slippery"]))
        return default_max_turns(int(size or DEFAULTS["size"]), bool(slippery))

    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        if "map" in task:
            self.map = self._checked_map(task["map"])
            slippery = bool(self.pinned.get("slippery", task.get("slippery", DEFAULTS["slippery"])))
        else:
            spec = lake_spec(task, self.pinned)
            self.map, slippery = self._generated_map(spec), spec.slippery
        if self.lake is None or (self.lake.rows, self.lake.slippery) != (self.map, slippery):
            self.lake, self.slippery = Lake(self.map, slippery), slippery
            self.board_rows = [" ".join(row) for row in self.map]
            self.step_texts: dict[tuple[int, Position, Position], str] = {}
        # Slips come from this env's seeded generator: one seed, one episode.
        self.lake.reset(self.np_random)
        if self.requested_max_turns is None:
            self.max_turns = default_max_turns(len(self.map), slippery)
        intro = [
            "FrozenLake: walk from the start S to the goal G across a frozen lake "
            "without falling into a hole.",
            LEGEND,
            *([SLIPPERY_RULE] if slippery else []),
            ROWS_RULE,
            f"You have {self.max_turns} moves. {HOW_TO_ANSWER}",
            "",
            self._board_text(),
        ]
        return "\n".join(intro), {"size": len(self.map), "slippery": slippery}

    def act(self, action: str) -> Transition:
        parsed = parse_move(action)
        if parsed.action is None:
            return Transition.invalid(
                f"Invalid move: {parsed.problem} You did not move. {HOW_TO_ANSWER}\n\n"
                + self._board_text(),
                self.format_penalty,
            )
        before = self.lake.position
        after, reward, terminated = self.lake.step(parsed.action, self.np_random)
        # On a given lake the text depends only on the move and the two positions; episodes
        # revisit them all the time, so each text is built once.
        key = (parsed.action, before, after)
        text = self.step_texts.get(key)
        if text is None:
            text = self.step_texts[key] = self._step_text(*key)
        info: dict[str, Any] = {"move": MOVE_NAMES[parsed.action]}
        if terminated:
            info["is_correct"] = self.map[after[0]][after[1]] == "G"
        return Transition(text, reward, terminated, info=info)

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    def capture_state(self) -> dict[str, Any]:
        # The lake is all the episode holds beyond the base fields: the slip draws come from
        # np_random, which the base snapshot carries.
        if self.lake is None:
            return {"map": None, "slippery": self.slippery, "position": None}
        return {"map": self.map, "slippery": self.slippery, "position": self.lake.position}

    def restore_state(self, state: dict[str, Any]) -> None:
        rows, slippery = state["map"], state["slippery"]
        if rows is None:
            self.lake, self.map, self.slippery = None, (), slippery
            return
        if self.lake is None or (self.lake.rows, self.lake.slippery) != (rows, slippery):
            self.lake, self.slippery = Lake(rows, slippery), slippery
            self.board_rows = [" ".join(row) for row in rows]
            self.step_texts = {}
        self.map = rows
        self.lake.position = state["position"]

    def close(self) -> None:
        self.lake = None
        self.step_texts = {}
        self.recent_maps.clear()
        super().close()

    def task_name(self) -> str:
        return "frozenlake"

    # -- helpers ---------------------------------------------------------------------------
    def _board_text(self, position: Position | None = None) -> str:
        # Same text as `render_board`, built from the cached rows: this runs every step.
        row, col = position or self.lake.position
        line = self.board_rows[row]
        rows = self.board_rows.copy()
        rows[row] = f"{line[: 2 * col]}{PLAYER}{line[2 * col + 1 :]}"
        return f"You are at row {row}, column {col}.\n" + "\n".join(rows)

    def _step_text(self, action: int, before: Position, after: Position) -> str:
        outcome = OUTCOMES.get(self.map[after[0]][after[1]], "")
        return f"{self._move_text(action, before, after)}{outcome}\n\n{self._board_text(after)}"

    def _move_text(self, action: int, before: Position, after: Position) -> str:
        name = MOVE_NAMES[action]
        intended = move(self.map, before, action)
        if after == intended and after != before:
            return f"You moved {name}."
        if after == before == intended:
            return f"You tried to move {name}, but the edge of the lake stopped you."
        return f"You tried to move {name}, but slipped on the ice."

    def _generated_map(self, spec: LakeSpec) -> tuple[str, ...]:
        return recall(self.recent_maps, spec, lambda: generate_map(spec))

    def _checked_map(self, rows: Any) -> tuple[str, ...]:
        if not isinstance(rows, (list, tuple)) or not all(isinstance(row, str) for row in rows):
            return check_map(rows)  # raises, saying what a map looks like
        return recall(self.recent_maps, tuple(rows), lambda: check_map(rows))


def recall(cache: dict, key: Any, build: Callable[[], Any], limit: int = RECENT_MAPS) -> Any:
    """`cache[key]`, built on a miss; the least recently used entry goes beyond `limit`."""
    value = cache.pop(key) if key in cache else build()
    cache[key] = value  # dicts keep insertion order: the most recent is last
    while len(cache) > limit:
        del cache[next(iter(cache))]
    return value


def lake_spec(task: Row, pinned: dict[str, Any]) -> LakeSpec:
    """The lake of a task row: make kwargs (`pinned`) win over row fields, then defaults."""
    if "seed" not in task:
        raise ValueError(
            f"a FrozenLake task needs a 'seed' (or an explicit 'map'); got fields {sorted(task)}"
        )
    fields = {**DEFAULTS, **{k: task[k] for k in DEFAULTS if k in task}, **pinned}
    spec = LakeSpec(int(task["seed"]), fields["size"], float(fields["p"]), bool(fields["slippery"]))
    check_spec(spec)
    return spec


def shipped_tasks(split: str) -> TaskSet:
    return TaskSources(shipped=SHIPPED_SPLITS).load(f"shipped:{split}")
