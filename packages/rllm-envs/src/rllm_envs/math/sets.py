"""Where the task sets shipped with rllm/Math-v0 live (how they were made: `build_sets`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
SHIPPED_SETS: Mapping[str, Path] = {
    name: DATA_DIR / f"{name}.jsonl"
    for name in ("gsm8k_train", "gsm8k_test", "math_train", "math_test")
}
