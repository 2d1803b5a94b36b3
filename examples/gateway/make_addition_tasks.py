"""Write the addition problems the docs' training run uses, as ``rllm/Math-v0`` task rows.

The table of ``rllm/Arithmetic-v0`` (every a + b with single digits) with the same held-out
pairs, phrased as math problems: ``{"id", "question", "answer"}``. A small model earns reward
on a fair share of them from the start, so a CPU run shows learning within minutes.

    python examples/gateway/make_addition_tasks.py   # writes addition_{train,test}.jsonl here
"""

from __future__ import annotations

import json
from pathlib import Path

from rllm_envs.arithmetic import held_out_pairs, training_pairs


def math_row(pair: dict) -> dict:
    a, b = pair["a"], pair["b"]
    return {"id": f"add-{a}-{b}", "question": f"What is {a} + {b}?", "answer": str(a + b)}


def main() -> None:
    here = Path(__file__).parent
    for name, pairs in (("train", training_pairs()), ("test", held_out_pairs())):
        rows = "".join(json.dumps(math_row(pair)) + "\n" for pair in pairs)
        (here / f"addition_{name}.jsonl").write_text(rows, encoding="utf-8")


if __name__ == "__main__":
    main()
