"""The task sets shipped with rllm/Code-v0, and how they were made from the public datasets.

Shipped (``data/``, licences in ``data/NOTICE``):

* ``humaneval``: OpenAI HumanEval (MIT), function style;
* ``mbpp``: MBPP, the sanitized split (CC-BY-4.0), function style;
* ``mbpp_stdio``: MBPP problems whose arguments and results are numbers, strings or lists of
  integers, rewritten as stdin/stdout problems (one argument per input line).

Every shipped task was checked when built: its reference solution passes all of its tests in
the bwrap sandbox, and tasks whose asserts could not be turned into host-side tests (or whose
reference failed) were left out. Rebuild with
``python -m rllm_envs.code.shipped HumanEval.jsonl.gz mbpp.jsonl OUT_DIR``.
"""

from __future__ import annotations

import ast
import gzip
import json
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rllm_envs.code.formats import TaskFormatError, from_humaneval, from_mbpp
from rllm_envs.core.tasks import Row

DATA_DIR = Path(__file__).parent / "data"
SHIPPED_SETS: Mapping[str, Path] = {
    "humaneval": DATA_DIR / "humaneval.jsonl",
    "mbpp": DATA_DIR / "mbpp.jsonl",
    "mbpp_stdio": DATA_DIR / "mbpp_stdio.jsonl",
}


# -- stdio rewriting -------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_line(value: Any) -> bool:
    return isinstance(value, str) and value == value.strip() and "\n" not in value and value != ""


# How each kind of value is written as one line, read back in Python, and described.
_LINE_KINDS = {
    "int": (_is_int, str, "int(line)", "an integer"),
    "ints": (
        lambda v: isinstance(v, list) and all(map(_is_int, v)),
        lambda v: " ".join(map(str, v)),
        "[int(x) for x in line.split()]",
        "integers separated by spaces",
    ),
    "str": (_is_line, str, "line", "a string"),
}
_RESULT_KINDS = {
    "bool": (lambda v: isinstance(v, bool), str, "True or False"),
    **{name: (test, write, text) for name, (test, write, _, text) in _LINE_KINDS.items()},
}


def _kind(value: Any, table: Mapping[str, tuple]) -> str | None:
    return next((name for name, spec in table.items() if spec[0](value)), None)


def to_stdio(task: Row, reference: str) -> tuple[Row, str] | None:
    """The stdin/stdout version of a function task and its reference program, if it has one."""
    arg_lists = [ast.literal_eval(test["args"]) for test in task["hidden_tests"]]
    results = [ast.literal_eval(test["expected"]) for test in task["hidden_tests"]]
    if any(test["compare"] != "exact" for test in task["hidden_tests"]):
        return None
    arg_kinds = {tuple(_kind(arg, _LINE_KINDS) for arg in args) for args in arg_lists}
    result_kinds = {_kind(result, _RESULT_KINDS) for result in results}
    if len(arg_kinds) != 1 or len(result_kinds) != 1 or None in result_kinds:
        return None
    (kinds,) = arg_kinds
    if not kinds or None in kinds:
        return None
    (result_kind,) = result_kinds
    write = _RESULT_KINDS[result_kind][1]
    tests = [
        {
            "input": "\n".join(_LINE_KINDS[k][1](arg) for k, arg in zip(kinds, args, strict=True))
            + "\n",
            "output": write(result) + "\n",
        }
        for args, result in zip(arg_lists, results, strict=True)
    ]
    lines = "\n".join(f"  line {i + 1}: {_LINE_KINDS[k][3]}" for i, k in enumerate(kinds))
    statement = task["prompt"].split("\nYour function")[0]
    prompt = (
        f"{statement}\n\nWrite a program that reads the input from standard input and prints "
        f"the answer.\nInput ({len(kinds)} line(s)):\n{lines}\nOutput: one line, "
        f"{_RESULT_KINDS[result_kind][2]}."
    )
    if result_kind == "ints":
        prompt += " (print nothing on that line for an empty list)"
    readers = ", ".join(
        f"{_LINE_KINDS[k][2].replace('line', f'lines[{i}]')}" for i, k in enumerate(kinds)
    )
    result_writer = "' '.join(map(str, result))" if result_kind == "ints" else "str(result)"
    program = (
        f"{task.get('preamble') or ''}\n{reference}\n\nimport sys\n"
        f"lines = sys.stdin.read().split('\\n')\nresult = {task['entry_point']}({readers})\n"
        f"print({result_writer})\n"
    )
    stdio_task = {
        "task_id": task["task_id"].replace("mbpp/", "mbpp-stdio/"),
        "prompt": prompt,
        "style": "stdio",
        "public_tests": tests[:1],
        "hidden_tests": tests,
    }
    return stdio_task, program


# -- building --------------------------------------------------------------------------------
def _read_rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _verified(sandbox, candidates: Iterable[tuple[Row, str]]) -> list[Row]:
    from rllm_envs.code.harness import run_tests

    def check(candidate: tuple[Row, str]) -> Row | None:
        task, reference = candidate
        report = run_tests(sandbox, task, reference, task["hidden_tests"])
        return {**task, "reference_solution": reference} if report.all_passed else None

    with ThreadPoolExecutor(2) as pool:
        return [task for task in pool.map(check, list(candidates)) if task is not None]


def _converted(rows: Iterable[dict], converter, reference) -> list[tuple[Row, str]]:
    converted = []
    for row in rows:
        try:
            task = converter(row)
        except (TaskFormatError, SyntaxError, ValueError):
            continue
        if len(task["hidden_tests"]) >= 2:
            converted.append((task, reference(row)))
    return converted


def build(humaneval_path: Path, mbpp_path: Path, out_dir: Path) -> dict[str, int]:
    from rllm_envs.sandbox import make_sandbox

    sandbox = make_sandbox("bwrap")
    humaneval = _converted(
        _read_rows(humaneval_path), from_humaneval, lambda r: r["prompt"] + r["canonical_solution"]
    )
    mbpp = _converted(_read_rows(mbpp_path), from_mbpp, lambda r: r["code"].replace("\r\n", "\n"))
    stdio = [pair for task, ref in mbpp if (pair := to_stdio(task, ref)) is not None]
    sets = {
        "humaneval": _verified(sandbox, humaneval),
        "mbpp": _verified(sandbox, mbpp),
        "mbpp_stdio": _verified(sandbox, stdio),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, tasks in sets.items():
        with (out_dir / f"{name}.jsonl").open("w", encoding="utf-8") as handle:
            for task in tasks:
                handle.write(json.dumps(task, ensure_ascii=False) + "\n")
    return {name: len(tasks) for name, tasks in sets.items()}


if __name__ == "__main__":
    humaneval_file, mbpp_file, out = map(Path, sys.argv[1:4])
    print(build(humaneval_file, mbpp_file, out))
