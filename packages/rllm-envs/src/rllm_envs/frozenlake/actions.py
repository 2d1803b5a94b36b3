"""The FrozenLake action grammar: what a model may write to make a move.

* One move name in any case (``Left``, ``down``, ``RIGHT``, ``up``), its first letter
  (``L D R U``) or Gymnasium's digit (``0`` Left, ``1`` Down, ``2`` Right, ``3`` Up).
* Inside backticks anywhere in a longer reply: the last backtick span that is a move wins,
  e.g. ``I will go `Down` now``.
* Without backticks, the whole reply must be the move, optionally prefixed with ``Action:`` or
  ``Move:`` and wrapped in quotes, asterisks or a trailing full stop.
* Reasoning before ``</think>`` is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rllm_envs.frozenlake.solver import MOVE_NAMES

MOVES: dict[str, int] = {
    **{name.lower(): index for index, name in enumerate(MOVE_NAMES)},
    **{name[0].lower(): index for index, name in enumerate(MOVE_NAMES)},
    **{str(index): index for index in range(len(MOVE_NAMES))},
}
HOW_TO_ANSWER = "Answer with one move: Left, Down, Right or Up (or 0-3), e.g. `Down`."

_LONGEST_TOKEN = 64  # a move is a word: longer spans are not read as one
_BACKTICK_SPAN = re.compile(rf"`+([^`]{{0,{_LONGEST_TOKEN}}})`+")
_PREFIX = re.compile(r"^(?:action|move)\s*[:=]\s*", re.IGNORECASE)
_WRAPPING = " \t\r\n\"'*_.!"
_EXCERPT_CHARS = 30
_SHORT_REPLY = 16


@dataclass(frozen=True)
class ParsedMove:
    action: int | None  # None when the reply holds no readable move
    problem: str = ""  # why not, in words for the agent


_PARSED = tuple(ParsedMove(action) for action in range(len(MOVE_NAMES)))


def parse_move(text: str) -> ParsedMove:
    if len(text) <= _SHORT_REPLY:  # the common case, a bare move: skip the full grammar
        action = MOVES.get(text.strip().lower())
        if action is not None:
            return _PARSED[action]
    reply = text.rpartition("</think>")[2] if "</think>" in text else text
    if not reply.strip():
        return ParsedMove(None, "Your reply was empty.")
    spans = _BACKTICK_SPAN.findall(reply)
    if spans:
        for span in reversed(spans):
            action = _read_token(span)
            if action is not None:
                return _PARSED[action]
        return ParsedMove(None, f"The text in backticks, {_excerpt(spans[-1])}, is not a move.")
    action = _read_token(reply)
    if action is not None:
        return _PARSED[action]
    return ParsedMove(None, f"Could not read a move from your reply {_excerpt(reply)}.")


def _read_token(text: str) -> int | None:
    if len(text) > _LONGEST_TOKEN:  # do not normalise megabytes of text for nothing
        return None
    token = _PREFIX.sub("", text.strip(_WRAPPING)).strip(_WRAPPING)
    return MOVES.get(token.lower())


def _excerpt(text: str) -> str:
    # Only the start matters (replies can be huge), and control characters would garble the
    # observation: the agent only needs the gist.
    text = " ".join(text[: 4 * _EXCERPT_CHARS].split())
    text = "".join(char if char.isprintable() else "?" for char in text)
    if len(text) > _EXCERPT_CHARS:
        text = text[:_EXCERPT_CHARS] + "..."
    return f'"{text}"'
