"""Host-side verdicts: a program's output against a hidden expected value.

These run outside the sandbox on plain data (text, or Python literals parsed with
`ast.literal_eval`), so nothing the untrusted code defines (an object whose ``__eq__`` always
says True, a patched `assert`) takes part in the comparison.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from typing import Any

_UNPARSABLE = object()


def parse_literal(text: str) -> Any:
    """The Python literal in `text`, or a sentinel that equals nothing."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _UNPARSABLE


def _json_shape(value: Any) -> Any:
    """Tuples as lists, recursively: JSON-sourced tests (APPS, LiveCodeBench) know no tuples."""
    if isinstance(value, (list, tuple)):
        return [_json_shape(item) for item in value]
    if isinstance(value, dict):
        return {key: _json_shape(item) for key, item in value.items()}
    return value


def _exact(got: Any, expected: Any, test: Mapping[str, Any]) -> bool:
    return got == expected


def _as_set(got: Any, expected: Any, test: Mapping[str, Any]) -> bool:
    try:
        return set(got) == set(expected)
    except TypeError:
        return False


def _close(got: Any, expected: Any, test: Mapping[str, Any]) -> bool:
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return False
    return math.isclose(
        got, expected, rel_tol=test.get("rel_tol", 1e-9), abs_tol=test.get("abs_tol", 0.0)
    )


def _json(got: Any, expected: Any, test: Mapping[str, Any]) -> bool:
    got, expected = _json_shape(got), _json_shape(expected)
    # APPS call-based outputs are sometimes wrapped in a one-element list.
    return got == expected or [got] == expected


COMPARISONS: Mapping[str, Callable[[Any, Any, Mapping[str, Any]], bool]] = {
    "exact": _exact,
    "set": _as_set,
    "close": _close,
    "json": _json,
    "truthy": lambda got, expected, test: bool(got) is True,
    "falsy": lambda got, expected, test: bool(got) is False,
}


def function_result_matches(output: str, test: Mapping[str, Any]) -> bool:
    """`output` is the repr the runner printed; `test["expected"]` a literal kept on the host."""
    got = parse_literal(output)
    if got is _UNPARSABLE:
        return False
    comparison = COMPARISONS[test.get("compare", "exact")]
    try:
        return bool(comparison(got, parse_literal(test["expected"]), test))
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False


def _tokens_match(got: str, expected: str, tolerance: float = 1e-6) -> bool:
    got_tokens, expected_tokens = got.split(), expected.split()
    if len(got_tokens) != len(expected_tokens):
        return False
    for mine, theirs in zip(got_tokens, expected_tokens, strict=True):
        if mine == theirs:
            continue
        try:
            if not math.isclose(float(mine), float(theirs), rel_tol=tolerance, abs_tol=tolerance):
                return False
        except ValueError:
            return False
    return True


def stdout_matches(output: str, expected: str) -> bool:
    """Line by line ignoring trailing spaces and blank lines at the end; else token by token
    with a 1e-6 tolerance on numbers (the usual judge rules of APPS-style sets)."""
    got_lines = [line.rstrip() for line in output.rstrip().splitlines()]
    expected_lines = [line.rstrip() for line in expected.rstrip().splitlines()]
    return got_lines == expected_lines or _tokens_match(output, expected)
