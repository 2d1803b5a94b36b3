"""Reading scores out of a judge's reply: JSON first, then ``<score>`` tags; never raises.

A reply is asked for ``count`` scores on a scale of 0 to ``scale``. What is accepted, in this
order (the first form that holds scores wins):

* JSON anywhere in the reply (the last object or list that holds scores, so a model that
  "thinks" before answering is read by its answer): ``{"score": 7}``, ``{"scores": [7, 2]}``,
  ``{"scores": [{"id": 1, "score": 7}, ...]}``, ``[7, 2]``. Numbers may be written as text
  (``"7"``).
* Tags: ``<score>7</score>`` once per score, in order, or with ids
  (``<score id="2">7</score>``), which place each score by its 1-based id.

Text inside ``<think>...</think>`` is ignored. A reply with no scores, or with another number of
scores than asked for, is a parse failure: every score is unknown. A single score that is not
a finite number is unknown too. A score outside 0..scale is clipped to the nearest end
(``out_of_range="clip"``, the default, counted in ``clipped``) or made unknown
(``out_of_range="refuse"``). The caller gives unknown scores its default and counts them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

OUT_OF_RANGE = ("clip", "refuse")

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_SCORE_TAG = re.compile(
    r"<score(?:\s+id\s*=\s*[\"']?(?P<id>\d+)[\"']?)?\s*>\s*(?P<value>[^<]*?)\s*</score>",
    re.IGNORECASE,
)
_JSON_START = re.compile(r"[\[{]")
_SCORE_KEYS = ("scores", "score", "rating", "ratings")
_ID_KEYS = ("id", "trajectory_id", "index", "transcript")


@dataclass(frozen=True)
class ParsedScores:
    """What a reply said: each score on 0..1 (None: unknown), the numbers as written, why some
    or all are unknown (None: every score was read), and how many were clipped."""

    scores: tuple[float | None, ...]
    raw: tuple[float | None, ...]
    failure: str | None = None
    clipped: int = 0

    def with_default(self, default: float) -> list[float]:
        return [default if score is None else score for score in self.scores]

    @property
    def unknown(self) -> int:
        return sum(score is None for score in self.scores)


def parse_scores(reply: str, count: int, scale: float, out_of_range: str = "clip") -> ParsedScores:
    """The `count` scores a judge's `reply` gives, normalised to 0..1 (module doc)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if not scale > 0:
        raise ValueError(f"scale must be greater than 0, got {scale}")
    if out_of_range not in OUT_OF_RANGE:
        raise ValueError(f"out_of_range must be one of {OUT_OF_RANGE}, got {out_of_range!r}")
    text = _THINK.sub(" ", reply or "")
    found = _json_scores(text)
    if found is None:
        found = _tagged_scores(text)
    nothing = (None,) * count
    if found is None:
        return ParsedScores(nothing, nothing, "no JSON scores or <score> tags in the reply")
    if len(found) != count:
        return ParsedScores(nothing, nothing, f"expected {count} scores, found {len(found)}")
    return _checked(found, scale, out_of_range)


def _checked(values: list[Any], scale: float, out_of_range: str) -> ParsedScores:
    scores: list[float | None] = []
    raw: list[float | None] = []
    problems: list[str] = []
    clipped = 0
    for position, value in enumerate(values, start=1):
        number = _number(value)
        raw.append(number)
        if number is None:
            problems.append(f"score {position} is not a number ({str(value)[:40]!r})")
            scores.append(None)
            continue
        if not 0 <= number <= scale:
            if out_of_range == "refuse":
                problems.append(f"score {position} ({number:g}) is outside 0..{scale:g}")
                scores.append(None)
                continue
            number = min(max(number, 0.0), float(scale))
            clipped += 1
        scores.append(number / scale)
    return ParsedScores(tuple(scores), tuple(raw), "; ".join(problems) or None, clipped)


def _number(value: Any) -> float | None:
    """`value` as a finite float (numbers, or text such as "7" or "7/10"), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip().split("/")[0].strip()  # "7/10": the score, not the scale
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _json_values(text: str) -> list[Any]:
    """Every JSON object or list that starts at some ``{`` or ``[`` of `text` and decodes."""
    decoder = json.JSONDecoder()
    values = []
    position = 0
    while True:
        match = _JSON_START.search(text, position)
        if match is None:
            return values
        try:
            value, end = decoder.raw_decode(text, match.start())
        except ValueError:
            position = match.start() + 1
            continue
        values.append(value)
        position = end


def _json_scores(text: str) -> list[Any] | None:
    """The scores of the last JSON value that holds some (None: no such value)."""
    for value in reversed(_json_values(text)):
        scores = _scores_in(value)
        if scores is not None:
            return scores
    return None


def _scores_in(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        for key in _SCORE_KEYS:
            if key in value:
                inner = value[key]
                if isinstance(inner, list):
                    return _scores_in(inner)
                if isinstance(inner, dict):  # {"scores": {"1": 7, "2": 3}}
                    return _by_id(list(inner.items()))
                return [inner]
        return None
    if isinstance(value, list) and value:
        if all(isinstance(item, dict) for item in value):
            entries = [_entry(item) for item in value]
            if any(entry is None for entry in entries):
                return None
            if all(identity is not None for identity, _ in entries):
                return _by_id(entries)
            return [score for _, score in entries]
        if all(not isinstance(item, (dict, list)) for item in value):
            return list(value)
    return None


def _entry(item: dict[str, Any]) -> tuple[Any, Any] | None:
    """(id or None, score) of one ``{"id": 2, "score": 7}`` item; None without a score."""
    score = next((item[key] for key in _SCORE_KEYS if key in item), None)
    if score is None:
        return None
    return next((item[key] for key in _ID_KEYS if key in item), None), score


def _by_id(entries: list[tuple[Any, Any]]) -> list[Any]:
    """Scores placed by their 1-based ids; in the order given when the ids are not exactly
    1..len(entries)."""
    try:
        ids = [int(str(identity).strip().lstrip("#")) for identity, _ in entries]
    except ValueError:
        return [score for _, score in entries]
    if sorted(ids) != list(range(1, len(entries) + 1)):
        return [score for _, score in entries]
    placed = dict(zip(ids, (score for _, score in entries), strict=True))
    return [placed[i] for i in sorted(placed)]


def _tagged_scores(text: str) -> list[Any] | None:
    tags = list(_SCORE_TAG.finditer(text))
    if not tags:
        return None
    entries = [(tag.group("id"), tag.group("value")) for tag in tags]
    if all(identity is not None for identity, _ in entries):
        return _by_id(entries)
    return [value for _, value in entries]
