"""Task rows of the common code datasets, turned into the one form rllm/Code-v0 grades.

The canonical row::

    {"task_id": "...", "prompt": "...", "style": "function" | "stdio",
     "entry_point": "name" (function style), "preamble": "imports put before the code",
     "public_tests": [test, ...], "hidden_tests": [test, ...]}

A stdio test is ``{"input": str, "output": str}``; a function test is
``{"args": "<Python literal list>", "expected": "<Python literal>", "compare": kind}`` where
kind names a comparison in `rllm_envs.code.compare.COMPARISONS`.

Converters, tried in order by the key a row has (`ROW_FORMATS`): the canonical form itself,
APPS/TACO (``input_output``), LiveCodeBench (``public_test_cases``), HumanEval (``test`` with
``check(candidate)``), MBPP (``test_list``).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Mapping
from typing import Any

from rllm_envs.core.tasks import Row

STYLES = ("function", "stdio")


class TaskFormatError(ValueError):
    """A row that no converter understands, or one without usable tests."""


# -- assert statements (HumanEval, MBPP) -----------------------------------------------------
def _literal(node: ast.AST) -> str | None:
    """The node's source if it is a Python literal, else None."""
    source = ast.unparse(node)
    try:
        ast.literal_eval(source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return source


def _call_args(node: ast.AST, callee: str) -> str | None:
    """`[args...]` as literal source when `node` calls `callee` with literal arguments only."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return None
    if node.func.id != callee or node.keywords:
        return None
    return _literal(ast.List(elts=list(node.args), ctx=ast.Load()))


def _unwrap_set(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "set":
        return node.args[0] if len(node.args) == 1 else None
    return None


def _keyword(node: ast.Call, name: str) -> float | None:
    for keyword in node.keywords:
        if keyword.arg == name and _literal(keyword.value) is not None:
            return float(ast.literal_eval(keyword.value))
    return None


def _equality_test(test: ast.Compare, callee: str) -> dict | None:
    if len(test.ops) != 1:
        return None
    left, right, op = test.left, test.comparators[0], test.ops[0]
    if isinstance(op, (ast.Is, ast.Eq)) and (args := _call_args(left, callee)):
        expected = _literal(right)
        return {"args": args, "expected": expected, "compare": "exact"} if expected else None
    inner_left, inner_right = _unwrap_set(left), _unwrap_set(right)
    if isinstance(op, ast.Eq) and inner_left is not None:
        args = _call_args(inner_left, callee)
        expected = _literal(inner_right if inner_right is not None else right)
        if args and expected:
            return {"args": args, "expected": expected, "compare": "set"}
    # abs(f(x) - y) < tol
    if isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call):
        if getattr(left.func, "id", None) == "abs" and len(left.args) == 1:
            difference = left.args[0]
            if isinstance(difference, ast.BinOp) and isinstance(difference.op, ast.Sub):
                args = _call_args(difference.left, callee)
                expected, tolerance = _literal(difference.right), _literal(right)
                if args and expected and tolerance:
                    return {
                        "args": args,
                        "expected": expected,
                        "compare": "close",
                        "abs_tol": float(ast.literal_eval(tolerance)),
                        "rel_tol": 0.0,
                    }
    return None


def _isclose_test(test: ast.Call, callee: str) -> dict | None:
    function = test.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
    if name != "isclose" or len(test.args) != 2:
        return None
    args, expected = _call_args(test.args[0], callee), _literal(test.args[1])
    if not (args and expected):
        return None
    rel_tol = _keyword(test, "rel_tol")
    abs_tol = _keyword(test, "abs_tol")
    return {
        "args": args,
        "expected": expected,
        "compare": "close",
        "rel_tol": 1e-9 if rel_tol is None else rel_tol,
        "abs_tol": 0.0 if abs_tol is None else abs_tol,
    }


def tests_from_asserts(source: str, callee: str) -> list[dict]:
    """Function tests from `assert` statements calling `callee` with literal arguments.

    Forms understood: ``f(a) == b``, ``f(a) is b``, ``set(f(a)) == set(b)``,
    ``math.isclose(f(a), b, rel_tol=...)``, ``abs(f(a) - b) < tol``, ``f(a)``, ``not f(a)``.
    Other asserts are skipped (the caller decides whether enough tests remain).
    """
    tests = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert):
            continue
        test = node.test
        found: dict | None = None
        if isinstance(test, ast.Compare):
            found = _equality_test(test, callee)
        elif isinstance(test, ast.Call) and (args := _call_args(test, callee)):
            found = {"args": args, "expected": "True", "compare": "truthy"}
        elif isinstance(test, ast.Call):
            found = _isclose_test(test, callee)
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            if args := _call_args(test.operand, callee):
                found = {"args": args, "expected": "False", "compare": "falsy"}
        if found:
            tests.append(found)
    return tests


def _require_tests(task_id: str, tests: list) -> list:
    if not tests:
        raise TaskFormatError(f"task {task_id}: no test could be read from the row")
    return tests


# -- converters ------------------------------------------------------------------------------
def from_canonical(row: Mapping[str, Any]) -> Row:
    task = dict(row)
    if task.get("style") not in STYLES:
        raise TaskFormatError(f"task style must be one of {STYLES}, got {task.get('style')!r}")
    if task["style"] == "function" and not task.get("entry_point"):
        raise TaskFormatError("a function-style task needs an 'entry_point'")
    task.setdefault("public_tests", [])
    _require_tests(str(task.get("task_id")), task["hidden_tests"])
    return task


def _import_lines(prompt: str) -> str:
    """The prompt's import lines, so code that relies on them (e.g. `List`) still runs."""
    lines = [line for line in prompt.splitlines() if line.startswith(("import ", "from "))]
    return "\n".join(lines)


def from_humaneval(row: Mapping[str, Any]) -> Row:
    tests = _require_tests(row["task_id"], tests_from_asserts(row["test"], "candidate"))
    return {
        "task_id": str(row["task_id"]),
        "prompt": row["prompt"],
        "style": "function",
        "entry_point": row["entry_point"],
        "preamble": _import_lines(row["prompt"]),
        "public_tests": tests[:1],
        "hidden_tests": tests,
    }


def _mbpp_entry_point(test_list: list[str]) -> str:
    for statement in test_list:
        for node in ast.walk(ast.parse(statement)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id not in {"set", "abs", "isclose", "sorted", "list", "tuple"}:
                    return node.func.id
    raise TaskFormatError("MBPP row: no function call found in test_list")


def from_mbpp(row: Mapping[str, Any]) -> Row:
    test_list = list(row["test_list"])
    entry_point = _mbpp_entry_point(test_list)
    tests = _require_tests(
        f"mbpp/{row['task_id']}", tests_from_asserts("\n".join(test_list), entry_point)
    )
    text = row.get("text") or row.get("prompt") or ""
    example = test_list[0].strip()
    return {
        "task_id": f"mbpp/{row['task_id']}",
        "prompt": f"{text}\nYour function `{entry_point}` must satisfy, for example:\n{example}",
        "style": "function",
        "entry_point": entry_point,
        "preamble": row.get("test_setup_code") or "",
        "public_tests": tests[:1],
        "hidden_tests": tests,
    }


def _as_text(value: Any) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def from_apps(row: Mapping[str, Any]) -> Row:
    """APPS / TACO rows: `question` and an `input_output` JSON with inputs, outputs, fn_name."""
    spec = row["input_output"]
    spec = json.loads(spec) if isinstance(spec, str) else dict(spec)
    inputs, outputs = spec.get("inputs") or [], spec.get("outputs") or []
    task_id = str(row.get("problem_id", row.get("task_id", row.get("id", ""))))
    name = spec.get("fn_name")
    if name:
        tests = [
            {"args": repr(list(args)), "expected": repr(expected), "compare": "json"}
            for args, expected in zip(inputs, outputs, strict=False)
        ]
    else:
        tests = [
            {"input": _as_text(given), "output": _as_text(wanted)}
            for given, wanted in zip(inputs, outputs, strict=False)
        ]
    prompt = row.get("question") or row.get("prompt") or ""
    if row.get("starter_code"):
        prompt += f"\n\nStart from:\n{row['starter_code']}"
    return {
        "task_id": f"apps/{task_id}" if task_id else "",
        "prompt": prompt,
        "style": "function" if name else "stdio",
        "entry_point": name,
        "public_tests": _require_tests(task_id, tests)[:1],
        "hidden_tests": tests,
    }


def _lcb_cases(value: Any) -> list[dict]:
    if isinstance(value, list):
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, TypeError) as error:
        raise TaskFormatError(
            "LiveCodeBench test cases must be plain JSON; decompress the release's encoded "
            "private_test_cases to JSON first"
        ) from error


def _lcb_test(case: Mapping[str, Any], function: str | None) -> dict:
    if function:
        args = [json.loads(line) for line in case["input"].splitlines() if line.strip()]
        expected = json.loads(case["output"])
        return {"args": repr(args), "expected": repr(expected), "compare": "json"}
    return {"input": case["input"], "output": case["output"]}


def from_livecodebench(row: Mapping[str, Any]) -> Row:
    metadata = row.get("metadata") or {}
    metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    function = metadata.get("func_name")
    public = [_lcb_test(case, function) for case in _lcb_cases(row["public_test_cases"])]
    private = [_lcb_test(case, function) for case in _lcb_cases(row.get("private_test_cases", []))]
    prompt = row.get("question_content", "")
    if row.get("starter_code"):
        prompt += f"\n\nStart from:\n{row['starter_code']}"
    task_id = str(row.get("question_id", row.get("task_id", "")))
    return {
        "task_id": f"livecodebench/{task_id}",
        "prompt": prompt,
        "style": "function" if function else "stdio",
        "entry_point": function,
        "public_tests": public,
        "hidden_tests": _require_tests(task_id, public + private),
    }


# First key found decides the format (dict order is the order of preference).
ROW_FORMATS: Mapping[str, Callable[[Mapping[str, Any]], Row]] = {
    "hidden_tests": from_canonical,
    "input_output": from_apps,
    "public_test_cases": from_livecodebench,
    "test_list": from_mbpp,
    "test": from_humaneval,
}


def to_code_task(row: Mapping[str, Any]) -> Row:
    """The canonical task of a row in any supported format."""
    for key, converter in ROW_FORMATS.items():
        if key in row:
            try:
                return converter(row)
            except TaskFormatError:
                raise
            except (KeyError, TypeError, ValueError, SyntaxError) as error:
                raise TaskFormatError(
                    f"row looks like {converter.__name__[5:]} but: {error!r}"
                ) from error
    raise TaskFormatError(
        f"unknown code task format (keys {sorted(row)}); expected one of {list(ROW_FORMATS)}"
    )
