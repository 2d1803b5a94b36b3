"""Reading a move out of what a model wrote: the action grammar every multi-agent env shares.

A reply names one of the legal moves the observation listed:

1. Only the text after the last ``</think>`` counts; a reply still inside ``<think>`` names no
   move.
2. The last span in backticks (`` `B2` ``), else the text after the last ``Move:`` (or
   ``Answer:``) on its line, else the whole reply, is read as the move. Case, spaces,
   quotes, brackets and closing punctuation do not matter, and an env may accept aliases
   (tic-tac-toe takes ``5`` for ``B2``).
3. If that is not a legal move, the legal move the reply names last, as a whole word, counts
   ("I will take the centre, B2." plays B2). Aliases count inside prose only where an env
   says so (chess's ``Nf3``; never tic-tac-toe's cell numbers).

Anything else names no move; the env then says why and applies its invalid-move rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_BACKTICKS = re.compile(r"`([^`\n]{1,80})`")
_LABELLED = re.compile(r"(?:move|answer)\s*:\s*([^\n]{1,80})", re.IGNORECASE)
_EDGES = " \t\r\n\"'`*.,;:!?()[]{}<>+#"


@dataclass(frozen=True)
class MoveReading:
    """The legal move a reply names (None when it names none) and why not."""

    move: str | None
    problem: str = ""
    quoted: str = ""  # the part of the reply read as the move, for the error message


def normalize(text: str) -> str:
    """Case-, space- and punctuation-insensitive form of a move."""
    return re.sub(r"\s+", "", text.strip(_EDGES).lower())


def read_move(
    reply: str,
    legal_moves: Sequence[str],
    aliases: Mapping[str, str] | None = None,
    *,
    aliases_in_prose: bool = False,
) -> MoveReading:
    """The legal move `reply` names, by the rules in the module docstring."""
    if not legal_moves:
        return MoveReading(None, "there is no legal move to make now")
    text = _after_thinking(reply)
    if text is None:
        return MoveReading(None, "the reply never closed <think>, so it names no move")
    table = {normalize(move): move for move in legal_moves}
    for alias, move in (aliases or {}).items():
        if move in legal_moves:
            table.setdefault(normalize(alias), move)
    quoted = _quoted_part(text)
    if normalize(quoted) in table:
        return MoveReading(table[normalize(quoted)], quoted=quoted)
    words = dict(zip(legal_moves, legal_moves, strict=True))
    if aliases_in_prose:
        words.update(
            (alias, move) for alias, move in (aliases or {}).items() if move in legal_moves
        )
    named = _last_named(text, words)
    if named is not None:
        return MoveReading(named, quoted=quoted)
    shown = quoted.strip()
    if not shown:
        return MoveReading(None, "the reply is empty", quoted="")
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return MoveReading(None, f"`{shown}` is not one of the legal moves", quoted=shown)


def _after_thinking(reply: str) -> str | None:
    if _THINK_CLOSE in reply:
        return reply.rsplit(_THINK_CLOSE, 1)[1]
    if _THINK_OPEN in reply:
        return None
    return reply


def _quoted_part(text: str) -> str:
    spans = _BACKTICKS.findall(text)
    if spans:
        return spans[-1]
    labelled = _LABELLED.findall(text)
    if labelled:
        return labelled[-1]
    return text


def _last_named(text: str, words: Mapping[str, str]) -> str | None:
    """The move whose word (a move or an alias of it) is mentioned last, as a whole word, in
    `text`; of two mentions ending at the same place the longer word wins."""
    best, best_end, best_length = None, -1, 0
    lowered = text.lower()
    for word, move in words.items():
        pattern = re.escape(word.strip().lower())
        if not pattern:
            continue
        for match in re.finditer(rf"(?<![\w]){pattern}(?![\w])", lowered):
            longer = match.end() == best_end and len(word) > best_length
            if match.end() > best_end or longer:
                best, best_end, best_length = move, match.end(), len(word)
    return best
