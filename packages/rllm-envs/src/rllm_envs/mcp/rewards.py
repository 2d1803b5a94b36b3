"""Reward functions of the MCP env: a table of graders plus user callables by import string.

A grader takes the final answer and the task row and returns a float in [0, 1]. The row's
``answer`` is a string or a list of acceptable strings (the best match counts).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from rllm_envs.core.loading import load_attr

Grader = Callable[[str, Mapping[str, Any]], float]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the usual QA normalisation)."""
    text = _ARTICLES.sub(" ", str(text).lower().translate(_PUNCTUATION))
    return " ".join(text.split())


def gold_answers(task: Mapping[str, Any]) -> list[str]:
    gold = task.get("answer", task.get("answers"))
    if gold is None:
        raise ValueError("the task row has no 'answer' to grade against")
    return [str(item) for item in gold] if isinstance(gold, (list, tuple)) else [str(gold)]


def exact_match(answer: str, task: Mapping[str, Any]) -> float:
    guess = normalize_answer(answer)
    return float(any(guess == normalize_answer(gold) for gold in gold_answers(task)))


def _f1(guess: str, gold: str) -> float:
    guess_tokens, gold_tokens = normalize_answer(guess).split(), normalize_answer(gold).split()
    common = sum((Counter(guess_tokens) & Counter(gold_tokens)).values())
    if not guess_tokens or not gold_tokens or common == 0:
        return float(guess_tokens == gold_tokens)
    precision, recall = common / len(guess_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(answer: str, task: Mapping[str, Any]) -> float:
    return max(_f1(answer, gold) for gold in gold_answers(task))


def math_verify(answer: str, task: Mapping[str, Any]) -> float:
    from rllm_envs.core.extras import require_extra

    require_extra("math", "math_verify")
    from math_verify import parse, verify

    def parsed(text: str) -> Any:
        # Bare LaTeX needs math delimiters; the grader runs off the main thread: no signals.
        wrapped = text if "$" in text or "\\boxed" in text else f"${text}$"
        return parse(wrapped, parsing_timeout=None)

    guess = parsed(answer)
    return float(
        any(verify(parsed(gold), guess, timeout_seconds=None) for gold in gold_answers(task))
    )


GRADERS: Mapping[str, Grader] = {
    "exact_match": exact_match,
    "f1": token_f1,
    "math_verify": math_verify,
}


def resolve_grader(name_or_callable: str | Grader) -> Grader:
    """A grader from the table, a ``"module:function"`` import string, or a callable."""
    if callable(name_or_callable):
        return name_or_callable
    if name_or_callable in GRADERS:
        return GRADERS[name_or_callable]
    if ":" in name_or_callable:
        grader = load_attr(name_or_callable, what="MCP reward")
        if not callable(grader):
            raise TypeError(f"reward {name_or_callable!r} is not callable")
        return grader
    raise ValueError(
        f"unknown reward {name_or_callable!r}: use one of {sorted(GRADERS)} "
        "or an import string 'module:function'"
    )
