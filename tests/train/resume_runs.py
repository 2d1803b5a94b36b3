"""The native runs the resume tests kill and resume (test_run_folder_faults,
test_async_training): the CLI call, its environment, a run killed at a named phase, and what
a run left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from rllm_agents.run_folder import KILL_AT_VARIABLE

from tests.train import reply_length
from tests.train.conftest import run_overrides

STEPS = 4
REPO = Path(__file__).resolve().parents[2]


def command(output: Path, model: str, *extra: str, **changes: object) -> list[str]:
    """The CLI call of these runs; `changes` ({"trainer.steps": 40}) replace their settings
    (an override in `extra` would not: the settings come after it and win)."""
    overrides = run_overrides(
        output,
        model,
        **{
            "env.id": reply_length.MODULE_ENV_ID,
            "trainer.steps": STEPS,
            "trainer.save_every": 1,
            "trainer.keep_checkpoints": 10,
            "rollout.temperature": 2.0,
            "trainer.tensorboard": False,
            **changes,
        },
    )
    return [
        sys.executable,
        "-m",
        "rllm_train.cli",
        *extra,
        *(f"{key}={value}" for key, value in overrides.items()),
    ]


def run_env() -> dict[str, str]:
    # One thread: the same arithmetic order in every process, so runs compare bit for bit.
    # The repository comes first on the path (for tests.train.reply_length), then whatever
    # the test run put there (a source tree under test).
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def final_state(output: Path) -> dict:
    return torch.load(output / "checkpoints" / f"step_{STEPS}" / "state.pt", weights_only=False)


def metric_rows(output: Path) -> list[dict]:
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def run(output: Path, model: str, *extra: str, kill_at: str | None = None):
    env = run_env()
    env.pop(KILL_AT_VARIABLE, None)
    if kill_at:
        env[KILL_AT_VARIABLE] = kill_at
    return subprocess.run(
        command(output, model, *extra), env=env, capture_output=True, text=True, timeout=300
    )


def latest_step(output: Path) -> int:
    latest = output / "checkpoints" / "latest"
    return int(latest.read_text().strip().removeprefix("step_")) if latest.exists() else 0
