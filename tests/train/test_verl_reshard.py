"""A verl checkpoint saved by N training processes resumes in M (rllm_train.verl.reshard).

Checkpoints are saved and loaded by verl's own ``FSDPCheckpointManager`` on an FSDP2-sharded
model in real gloo process groups (tests/train/reshard_check.py); after a load, every parameter
and Adam moment the new ranks hold, gathered whole, must equal the saved shards joined by hand,
bit for bit: regathering moves numbers, it computes none. A whole run saved by 2 processes and
resumed in 1 is in tests/train/test_verl_scale.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.parts import require_module

pytestmark = pytest.mark.slow
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def verl_installed():
    require_module("verl", "the verl backend: pip install 'rllm-train[verl]'")


def ranks(model: str, world_size: int, *actions: str) -> subprocess.Popen:
    """One process group of `world_size` ranks running `actions` (see reshard_check)."""
    command = [sys.executable, "-m", "tests.train.reshard_check", "--model", model,
               "--world-size", str(world_size), *actions]  # fmt: skip
    return subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def wait_for(groups: list[subprocess.Popen], seconds: float = 300) -> None:
    try:
        for group in groups:
            _, stderr = group.communicate(timeout=seconds)
            assert group.returncode == 0, stderr[-4000:]
    finally:
        for group in groups:
            if group.poll() is None:
                group.kill()
                group.wait()


@pytest.fixture(scope="module")
def loads(tmp_path_factory, tiny_model) -> dict:
    """Checkpoints after one AdamW step saved by 1 and by 2 processes, each loaded by 1 and 2
    (and one with a shard missing); what each load held, by (saved by, loaded by). The two
    groups run at once, each loading once the saves it reads are whole."""
    import shutil

    import torch

    from tests.train.reshard_check import SAVED_MARKER

    root = tmp_path_factory.mktemp("reshard")
    saved = {1: root / "saved-by-1", 2: root / "saved-by-2"}
    held = {pair: root / f"held-{pair[0]}-{pair[1]}.pt" for pair in ((1, 2), (2, 2), (2, 1))}
    damaged, damaged_held = root / "damaged", root / "held-damaged.pt"
    groups = [
        ranks(tiny_model, 2, "--save", str(saved[2]), "--after", str(saved[1]),
              "--load", f"{saved[1]}={held[1, 2]}", "--load", f"{saved[2]}={held[2, 2]}"),
        ranks(tiny_model, 1, "--save", str(saved[1]), "--after", str(damaged),
              "--load", f"{saved[2]}={held[2, 1]}", "--load", f"{damaged}={damaged_held}"),
    ]  # fmt: skip
    try:
        while not (saved[2] / SAVED_MARKER).is_file():
            assert groups[0].poll() is None, groups[0].communicate()[1][-4000:]
            time.sleep(0.2)
        shutil.copytree(saved[2], damaged, ignore=shutil.ignore_patterns(SAVED_MARKER))
        (damaged / "optim_world_size_2_rank_1.pt").unlink()
        (damaged / SAVED_MARKER).touch()
    finally:
        wait_for(groups)
    results = {pair: torch.load(path, weights_only=False) for pair, path in held.items()}
    return {
        "saved": saved,
        "held": results,
        "damaged": torch.load(damaged_held, weights_only=False),
    }


@pytest.mark.parametrize(("saved_by", "loaded_by"), [(2, 1), (1, 2), (2, 2)])
def test_a_checkpoint_resumes_with_another_number_of_processes(loads, saved_by, loaded_by):
    import torch
    from rllm_train.verl.reshard import full_model_state, full_optimizer_state

    held = loads["held"][saved_by, loaded_by]
    assert "error" not in held, held.get("error")
    folder = loads["saved"][saved_by]
    expected = full_model_state(folder, saved_by)
    assert held["params"], "no parameters held"
    for name, value in held["params"].items():
        assert torch.equal(value, expected[name]), name
    # Adam's moments, in the optimizer's parameter order (that of named_parameters).
    moments = full_optimizer_state(folder, saved_by)["state"]
    names = list(held["params"])
    for index, state in moments.items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(held["moments"][f"{names[index]}/{key}"], state[key]), names[index]
    assert any(state["exp_avg"].abs().sum() > 0 for state in moments.values())  # a real step
    assert held["steps"] == [1.0]  # Adam's step count and the schedule went on, not restarted
    assert held["last_epoch"] == 1


def test_a_checkpoint_with_a_missing_shard_is_refused_by_name(loads):
    assert "optim_world_size_2_rank_1.pt is missing" in loads["damaged"]["error"]
