"""What an agent program hands back, and the ways a program run can fail.

A command prints its result as the last non-empty line of its stdout:

* a JSON object is a result object (below);
* anything else is the program's **answer**, graded by the env - a plain ``print(answer)``
  (``42``, ``The answer is \\boxed{42}``), and a bare JSON string (``"42"``, decoded) or number
  (``42``) alike: a number on its own is an answer, never a reward.

A callable returns a number - the episode's reward -, a string - its answer -, or a result
object. A result object has

* ``reward`` (number): the episode's reward, as the program scored it;
* ``answer`` (string or number): the program's final answer, graded by the env when there is
  no ``reward`` (``env.reset(options={"task": row})`` then ``env.step(answer)``);
* ``info`` (object): anything else worth keeping on the episode (``info["is_correct"]``, when
  a self-scoring program sets it, is the episode's correctness).

At least one of ``reward`` and ``answer`` must be there; any other key is refused, so a typo
(``"rewrad"``) is a clear failure instead of an episode silently graded as wrong. The answer of
an episode is kept in ``Episode.info["answer"]``, where a garbled result line shows up.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.types import TerminationReason

RESULT_KEYS = ("reward", "answer", "info")
# How much of a program's stdout or stderr a failure record keeps (the end: where it died).
OUTPUT_TAIL_CHARS = 4000

# Failure kind -> how the episode ends. ERROR and TIMEOUT episodes are retried by the workflow
# engine and not scored or trained on, as with any agent.
FAILURE_ENDINGS: dict[str, TerminationReason] = {
    "crashed": TerminationReason.ERROR,  # a non-zero exit status, or the callable raised
    "timeout": TerminationReason.TIMEOUT,  # still running at the time limit; killed
    "bad_output": TerminationReason.ERROR,  # no output, or a result object that is not valid
    "no_model_calls": TerminationReason.ERROR,  # nothing went through the gateway
    "no_grader": TerminationReason.ERROR,  # an answer to grade, but no env to grade it with
}


class ProgramFailure(Exception):
    """A program run that produced no usable result; `kind` is a key of FAILURE_ENDINGS."""

    def __init__(self, kind: str, message: str, stderr: str = "") -> None:
        if kind not in FAILURE_ENDINGS:
            raise ValueError(f"unknown program failure kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.stderr = stderr

    @property
    def ending(self) -> TerminationReason:
        return FAILURE_ENDINGS[self.kind]


@dataclass(frozen=True)
class ProgramResult:
    reward: float | None = None
    answer: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def parse_result(value: Any) -> ProgramResult:
    """The result a callable returned (see the module docstring), or a ``bad_output`` failure."""
    if _is_number(value):
        return ProgramResult(reward=_finite(value, "the reward"))
    if isinstance(value, str):
        return ProgramResult(answer=value)
    if not isinstance(value, dict):
        raise ProgramFailure(
            "bad_output",
            f"a program returns a number (the reward), a string (the answer) or an object with "
            f"reward/answer/info, not {type(value).__name__}: {_clip(repr(value))}",
        )
    unknown = sorted(set(value) - set(RESULT_KEYS))
    if unknown:
        raise ProgramFailure(
            "bad_output", f"unknown result keys {unknown}; a result has {', '.join(RESULT_KEYS)}"
        )
    reward, answer, info = value.get("reward"), value.get("answer"), value.get("info", {})
    if reward is None and answer is None:
        raise ProgramFailure("bad_output", "the result has neither a reward nor an answer")
    if reward is not None and not _is_number(reward):
        raise ProgramFailure("bad_output", f"reward must be a number, got {_clip(repr(reward))}")
    if answer is not None and not (isinstance(answer, str) or _is_number(answer)):
        raise ProgramFailure(
            "bad_output", f"answer must be text or a number, got {_clip(repr(answer))}"
        )
    if not isinstance(info, dict):
        raise ProgramFailure("bad_output", f"info must be an object, got {_clip(repr(info))}")
    return ProgramResult(
        reward=None if reward is None else _finite(reward, "the reward"),
        answer=None if answer is None else str(answer),
        info=dict(info),
    )


def parse_output(stdout: str) -> ProgramResult:
    """The result a command printed: its last non-empty stdout line, a JSON result object or
    else its answer (see the module docstring)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ProgramFailure(
            "bad_output",
            "the program printed nothing; its last stdout line must be its answer, or a "
            'result object such as {"reward": 1.0}',
        )
    last = lines[-1]
    try:
        value = json.loads(last)
    except json.JSONDecodeError:  # plain text, or a set such as {1, 2}: an answer either way
        return ProgramResult(answer=last)
    if isinstance(value, dict):
        return parse_result(value)
    return ProgramResult(answer=value if isinstance(value, str) else last)


def tail(text: str, limit: int = OUTPUT_TAIL_CHARS) -> str:
    """The end of `text` (where a program said why it stopped), at most `limit` characters."""
    return text if len(text) <= limit else "..." + text[-limit:]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise ProgramFailure("bad_output", f"{what} must be a finite number, got {value!r}")
    return float(value)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
