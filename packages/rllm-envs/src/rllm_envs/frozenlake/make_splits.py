"""Regenerate the shipped task splits (data/train.jsonl, data/test.jsonl).

    python -m rllm_envs.frozenlake.make_splits

The output is deterministic. Train and test use disjoint seed ranges, and a test row whose map
also occurs in train is dropped, so the test split measures generalisation to unseen lakes.
Changing the splits changes the task data: bump the env's version (see the contract card).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rllm_envs.frozenlake.board import LakeSpec, generate_map

DATA = Path(__file__).parent / "data"
SPLIT_SIZES = {"train": 1000, "test": 200}
SPLIT_SEED_BASE = {"train": 0, "test": 1_000_000}
SIZES = (3, 4, 5, 6, 7, 8)
FROZEN_PROBABILITIES = (0.7, 0.8, 0.9)


def split_rows(split: str, excluded_maps: set[tuple[str, ...]]) -> Iterator[dict]:
    """Rows of a split: sizes and p drawn evenly, maps not in `excluded_maps`, no repeats."""
    choice = np.random.default_rng(SPLIT_SEED_BASE[split])
    seen = set(excluded_maps)
    seed = SPLIT_SEED_BASE[split]
    count = 0
    while count < SPLIT_SIZES[split]:
        size = int(choice.choice(SIZES))
        p = float(choice.choice(FROZEN_PROBABILITIES))
        lake = generate_map(LakeSpec(seed, size, p, slippery=False))
        seed += 1
        if lake in seen:
            continue
        seen.add(lake)
        yield {
            "task_id": f"frozenlake-{split}-{count:04d}",
            "seed": seed - 1,
            "size": size,
            "p": p,
            "slippery": False,
        }
        count += 1


def main() -> None:
    DATA.mkdir(exist_ok=True)
    train = list(split_rows("train", set()))
    train_maps = {
        generate_map(LakeSpec(row["seed"], row["size"], row["p"], False)) for row in train
    }
    test = list(split_rows("test", train_maps))
    for split, rows in (("train", train), ("test", test)):
        path = DATA / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
