"""How the task sets shipped with rllm/Math-v0 are built from the public data.

Shipped (``data/``, sources and licences in ``data/NOTICE.txt``):

* ``gsm8k_train`` / ``gsm8k_test``: grade-school word problems from GSM8K (MIT), sampled
  from its train and test files; the answer is the number after ``####``.
* ``math_test``: MATH-500 (MIT), the 500-problem subset of the MATH test split published with
  PRM800K, the usual benchmark.
* ``math_train``: other MATH problems (MIT), none of them in MATH-500; the answer is the last
  boxed answer of the reference solution. (Like PRM800K's training split, they come from
  MATH's test split minus MATH-500.)

Every shipped row was checked when built: the gold answer, boxed, grades correct against
itself, and (MATH) so does the reference solution's final boxed answer. Rebuild with::

    python -m rllm_envs.math.build_sets GSM8K_TRAIN GSM8K_TEST MATH500 MATH_PROBLEMS OUT_DIR

with ``grade_school_math/data/{train,test}.jsonl`` of github.com/openai/grade-school-math,
``prm800k/math_splits/test.jsonl`` of github.com/openai/prm800k and a JSONL file of MATH
problems in the original format (``problem``, ``level``, ``type``, ``solution``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from rllm_envs.core.tasks import Row
from rllm_envs.math.extract import last_boxed

SET_SIZES: Mapping[str, int] = {
    "gsm8k_train": 500,
    "gsm8k_test": 300,
    "math_train": 500,
    "math_test": 500,  # all of MATH-500
}
_SAMPLING_SEED = 0


def from_gsm8k(record: Mapping[str, str], split: str, index: int) -> Row:
    reasoning, _, answer = record["answer"].rpartition("####")
    return {
        "id": f"gsm8k/{split}/{index}",
        "question": record["question"].strip(),
        "answer": answer.strip().replace(",", ""),
        "solution": reasoning.strip(),
        "source": "gsm8k",
    }


def from_math500(record: Mapping[str, object], index: int) -> Row:
    unique_id = str(record.get("unique_id") or index).removesuffix(".json")
    return {
        "id": f"math/{unique_id}",
        "question": str(record["problem"]).strip(),
        "answer": str(record["answer"]).strip(),
        "solution": str(record["solution"]),
        "source": "math",
        "subject": record.get("subject"),
        "level": record.get("level"),
    }


def from_math(record: Mapping[str, str]) -> Row | None:
    """A row from a problem in MATH's own format (the answer is in the solution's last box)."""
    answer = last_boxed(record["solution"])
    if answer is None or not answer.strip():
        return None
    subject = record["type"].lower().replace(" & ", "_").replace(" ", "_")
    digest = hashlib.sha1(record["problem"].strip().encode()).hexdigest()[:10]
    return {
        "id": f"math/{subject}/{digest}",
        "question": record["problem"].strip(),
        "answer": answer.strip(),
        "solution": record["solution"],
        "source": "math",
        "subject": record["type"],
        "level": int(record["level"].removeprefix("Level ")),
    }


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def is_consistent(row: Row, grade: Callable[[str, str], bool]) -> bool:
    """The gold answer grades correct against itself, and so does the solution's final box."""
    if not grade(f"\\boxed{{{row['answer']}}}", row["answer"]):
        return False
    solution_box = last_boxed(row["solution"]) if row["source"] == "math" else None
    return solution_box is None or grade(f"\\boxed{{{solution_box}}}", row["answer"])


def _sample(rows: list[Row], count: int, grade: Callable[[str, str], bool]) -> list[Row]:
    order = np.random.default_rng(_SAMPLING_SEED).permutation(len(rows))
    kept: list[Row] = []
    for index in order:
        if len(kept) == count:
            break
        if is_consistent(rows[index], grade):
            kept.append(rows[index])
    return kept


def build(
    gsm8k_train: Path, gsm8k_test: Path, math500: Path, math_problems: Path, out_dir: Path
) -> dict[str, int]:
    from rllm_envs.math.grader import grade_answer
    from rllm_envs.math.verifier import Verifier

    with Verifier(timeout_s=20) as verifier:

        def grade(response: str, gold: str) -> bool:
            return grade_answer(response, gold, verifier=verifier).is_correct

        gsm_train = [from_gsm8k(r, "train", i) for i, r in enumerate(_read_jsonl(gsm8k_train))]
        gsm_test = [from_gsm8k(r, "test", i) for i, r in enumerate(_read_jsonl(gsm8k_test))]
        benchmark = [from_math500(r, i) for i, r in enumerate(_read_jsonl(math500))]
        in_benchmark = {row["question"] for row in benchmark}
        others = [from_math(record) for record in _read_jsonl(math_problems)]
        others = [row for row in others if row and row["question"] not in in_benchmark]
        sets = {
            "gsm8k_train": _sample(gsm_train, SET_SIZES["gsm8k_train"], grade),
            "gsm8k_test": _sample(gsm_test, SET_SIZES["gsm8k_test"], grade),
            "math_train": _sample(others, SET_SIZES["math_train"], grade),
            "math_test": _sample(benchmark, SET_SIZES["math_test"], grade),
        }
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in sets.items():
        _write_jsonl(out_dir / f"{name}.jsonl", sorted(rows, key=_natural_key))
    return {name: len(rows) for name, rows in sets.items()}


def _natural_key(row: Row) -> tuple:
    # "gsm8k/test/10" after "gsm8k/test/9": numbers sort as numbers, before any text.
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in row["id"].split("/"))


def _write_jsonl(path: Path, rows: Iterable[Row]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    *inputs, out = map(Path, sys.argv[1:6])
    print(build(*inputs, out))
