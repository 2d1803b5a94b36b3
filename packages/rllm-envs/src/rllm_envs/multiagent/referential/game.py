"""The referential game: a speaker describes a target item, a listener picks it out."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rllm_envs.multiagent.moves import read_move
from rllm_envs.multiagent.phase_env import PhasedTextEnv, PhaseResult

SPEAKER = "speaker_0"
LISTENER = "listener_0"
AGENTS = (SPEAKER, LISTENER)

# Concrete, single-word items a small model knows, from a few categories so that distractors
# are sometimes close (two fruits) and sometimes far (a fruit and a tool).
ITEMS = (
    "apple", "banana", "cherry", "grape", "lemon", "orange", "pear", "strawberry",
    "cat", "dog", "horse", "cow", "rabbit", "lion", "elephant", "frog",
    "car", "bicycle", "train", "boat", "airplane", "bus", "truck", "rocket",
    "hammer", "scissors", "spoon", "knife", "pencil", "key", "clock", "umbrella",
    "tree", "flower", "mountain", "river", "moon", "sun", "cloud", "star",
    "shirt", "shoe", "hat", "glove", "chair", "table", "lamp", "bed",
)  # fmt: skip


@dataclass
class RoundRecord:
    target: str
    message: str
    picked: str | None  # None: the listener's reply named no item

    @property
    def correct(self) -> bool:
        return self.picked == self.target


@dataclass
class _State:
    rounds: list[dict[str, Any]]
    index: int = 0
    phase: str = "speak"  # or "listen"
    message: str = ""
    records: list[RoundRecord] = field(default_factory=list)

    @property
    def current(self) -> dict[str, Any]:
        return self.rounds[self.index]


class ReferentialEnv(PhasedTextEnv):
    """Speaker and listener, cooperative (contract card: :mod:`rllm_envs.multiagent.referential`)."""

    metadata = {**PhasedTextEnv.metadata, "name": "referential_v0"}

    def __init__(
        self,
        *,
        rounds: int = 3,
        num_candidates: int = 3,
        max_message_chars: int = 200,
        taboo: bool = False,
        invalid_penalty: float = 0.5,
        items: tuple[str, ...] = ITEMS,
        max_cycles: int | None = None,
        **kwargs: Any,
    ) -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {rounds}")
        if not 2 <= num_candidates <= len(set(items)):
            raise ValueError(f"num_candidates must be 2 to {len(set(items))}, got {num_candidates}")
        if max_message_chars < 1:
            raise ValueError(f"max_message_chars must be at least 1, got {max_message_chars}")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty is subtracted; give it >= 0, got {invalid_penalty}")
        super().__init__(
            AGENTS, max_cycles=2 * rounds if max_cycles is None else max_cycles, **kwargs
        )
        self.rounds = rounds
        self.num_candidates = num_candidates
        self.max_message_chars = max_message_chars
        self.taboo = taboo
        self.invalid_penalty = float(invalid_penalty)
        self.items = tuple(dict.fromkeys(items))
        self.state: _State | None = None
        self._last_problem = ""

    # -- the task --------------------------------------------------------------------------
    def draw_task(self, rng: np.random.Generator) -> dict[str, Any]:
        rounds = []
        for _ in range(self.rounds):
            chosen = [
                self.items[int(i)]
                for i in rng.choice(len(self.items), self.num_candidates, replace=False)
            ]
            target = chosen[int(rng.integers(len(chosen)))]
            listener_order = [chosen[int(i)] for i in rng.permutation(len(chosen))]
            rounds.append({"items": chosen, "target": target, "listener_items": listener_order})
        return {"rounds": rounds}

    def begin(self, task: dict[str, Any]) -> None:
        rounds = task.get("rounds")
        if not isinstance(rounds, list) or not rounds:
            raise ValueError("a referential task is {'rounds': [{'items', 'target', ...}, ...]}")
        for row in rounds:
            items = row.get("items") if isinstance(row, dict) else None
            if not items or row.get("target") not in items or len(set(items)) != len(items):
                raise ValueError(f"each round needs distinct 'items' holding its 'target': {row!r}")
            listener_items = row.get("listener_items", items)
            if sorted(listener_items) != sorted(items):
                raise ValueError(f"'listener_items' must be the same items: {row!r}")
        self.state = _State(rounds=[dict(row) for row in rounds])

    def task_id(self, task: dict[str, Any]) -> str:
        digest = hashlib.blake2b(
            json.dumps(task, sort_keys=True).encode(), digest_size=4
        ).hexdigest()
        targets = "-".join(str(row.get("target")) for row in task.get("rounds", []))
        return f"referential/{targets}/{digest}"

    # -- the rules -------------------------------------------------------------------------
    def acting(self) -> tuple[str, ...]:
        assert self.state is not None
        return (SPEAKER,) if self.state.phase == "speak" else (LISTENER,)

    def resolve(self, replies: dict[str, str]) -> PhaseResult:
        state = self.state
        assert state is not None
        if state.phase == "speak":
            message, valid = self._read_message(replies.get(SPEAKER, ""))
            state.message = message
            state.phase = "listen"
            penalty = {} if valid or not self.invalid_penalty else {SPEAKER: -self.invalid_penalty}
            return PhaseResult(rewards=penalty, valid={SPEAKER: valid})
        listener_items = self._listener_items()
        aliases = {str(i + 1): item for i, item in enumerate(listener_items)}
        reading = read_move(replies.get(LISTENER, ""), listener_items, aliases)
        record = RoundRecord(state.current["target"], state.message, reading.move)
        self._last_problem = reading.problem
        state.records.append(record)
        score = 1.0 if record.correct else 0.0
        rewards = {SPEAKER: score, LISTENER: score}
        if reading.move is None:
            rewards[LISTENER] -= self.invalid_penalty
        state.index += 1
        state.phase = "speak"
        state.message = ""
        return PhaseResult(
            rewards=rewards,
            valid={LISTENER: reading.move is not None},
            over=state.index >= len(state.rounds),
        )

    def _read_message(self, reply: str) -> tuple[str, bool]:
        """The speaker's message: its reply after any thinking, clipped; empty is allowed."""
        text = reply.rsplit("</think>", 1)[-1].strip()
        text = text[: self.max_message_chars]
        assert self.state is not None
        if self.taboo and self._breaks_taboo(text, self.state.current["target"]):
            return "", False
        return text, True

    @staticmethod
    def _breaks_taboo(message: str, target: str) -> bool:
        return target.lower() in message.lower()

    def _listener_items(self) -> list[str]:
        assert self.state is not None
        row = self.state.current
        return list(row.get("listener_items", row["items"]))

    # -- what agents see -------------------------------------------------------------------
    def view(self, agent: str) -> str:
        state = self.state
        assert state is not None
        parts = []
        if self.replies[agent] == 0:
            parts.append(self._rules(agent))
        if state.records and (state.phase == "speak" or self.end_reason is not None):
            parts.append(self._last_round_text())
        if self.end_reason is not None:
            correct = sum(record.correct for record in state.records)
            parts.append(f"The game is over: {correct} of {len(state.records)} rounds correct.")
            return "\n\n".join(parts)
        if agent not in self.acting():
            other = "listener" if agent == SPEAKER else "speaker"
            parts.append(f"Waiting for the {other}.")
            return "\n\n".join(parts)
        round_line = f"Round {state.index + 1} of {len(state.rounds)}."
        if agent == SPEAKER:
            row = state.current
            parts.append(
                f"{round_line} Items: {', '.join(row['items'])}. Target: {row['target']}.\n"
                "Write your message for the listener."
            )
        else:
            items = self._listener_items()
            numbered = " ".join(f"{i + 1}. {item}" for i, item in enumerate(items))
            said = state.message if state.message else "(nothing)"
            parts.append(
                f'{round_line} The speaker says: "{said}"\nItems: {numbered}\n'
                f"Which item is the target? Reply with the item in backticks, e.g. `{items[0]}`."
            )
        return "\n\n".join(parts)

    def _rules(self, agent: str) -> str:
        shared = (
            f"You are the {{role}} in a referential game with {len(self.state.rounds)} "
            "round(s). Each round the speaker sees some items and which one is the target; "
            "the listener sees the same items in another order and the speaker's message, and "
            "picks one. You both score 1 when the listener picks the target."
        )
        if agent == SPEAKER:
            extra = f" Write a message of at most {self.max_message_chars} characters"
            extra += (
                " that does not contain the target's name."
                if self.taboo
                else " that helps the listener."
            )
            return shared.format(role="speaker") + extra
        return shared.format(role="listener") + " Pick the item the message points to."

    def _last_round_text(self) -> str:
        assert self.state is not None
        record = self.state.records[-1]
        number = len(self.state.records)
        if record.picked is None:
            return (
                f"Round {number}: the listener's reply named no item "
                f"({self._last_problem}); the target was {record.target}."
            )
        verdict = "correct" if record.correct else f"missed, the target was {record.target}"
        return f"Round {number}: the listener picked {record.picked} ({verdict})."

    def spectator_view(self) -> str:
        state = self.state
        assert state is not None
        lines = [
            f"round {i + 1}: target {r.target}, message {r.message!r}, picked {r.picked}"
            for i, r in enumerate(state.records)
        ]
        if self.end_reason is None:
            row = state.current
            lines.append(
                f"round {state.index + 1} ({state.phase}): items {row['items']}, target {row['target']}"
            )
        return "\n".join(lines)

    def extra_info(self, agent: str) -> dict[str, Any]:
        state = self.state
        assert state is not None
        info: dict[str, Any] = {
            "round": min(state.index, len(state.rounds) - 1),
            "rounds_correct": sum(record.correct for record in state.records),
            "rounds_played": len(state.records),
        }
        if self.end_reason is not None:
            return info
        if agent == SPEAKER:
            info["items"] = list(state.current["items"])
            info["target"] = state.current["target"]
        else:
            info["items"] = self._listener_items()
            info["message"] = state.message
            if state.phase == "listen":
                info["legal_moves"] = self._listener_items()
        return info
