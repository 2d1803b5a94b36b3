"""verl's own trainer really trains, on this CPU: ``rllm-train --backend verl`` end to end.

Each run is the installed command as a user types it, with no device flag: verl's task runner,
its FSDP2 actor (and critic, reference), its agent-loop workers running ``RllmAgentLoop`` on a
multi-turn env (FrozenLake, rewarded by reply length so the tiny model's samples differ and
every update has a gradient), and rllm's LocalEngine as the rollout, into which verl's weight
sync loads every update. The tests read what the run computed: grad norms, the gap between the
rollout engine's log-probs and the trainer's (zero up to float error only if the engine holds
the updated weights), weights that moved, and the run folder the native backend would write.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.parts import require_module
from tests.train.reply_length import LAKE_MODULE_ENV_ID

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
# Both engines compute in float32 on a CPU: after a weight sync their per-token probabilities
# differ by float rounding only (seen: about 1e-11). A stale engine would differ by the update.
PROB_GAP_TOLERANCE = 1e-5
RUN_FLAGS = (
    "--backend", "verl", "--env", LAKE_MODULE_ENV_ID, "--model", "tiny", "--no-progress",
    "rollout.tasks_per_step=2", "rollout.n=2", "rollout.max_turns=2",
    "rollout.max_response_tokens=16", "trainer.micro_batch_size=2", "trainer.lr=1e-3",
    "model.lora_rank=0",  # verl's own trainer on full weights: what these tests check
    "verl.agent_workers=1", "trainer.validate_held_out=false",
)  # fmt: skip
NATIVE_RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json", "reward_curve.png")


def command_and_env(
    output: Path, extra: tuple[str, ...], ray_address: str | None
) -> tuple[list[str], dict[str, str]]:
    """The installed command; with `ray_address`, on that cluster in CPU mode (named, since a
    named cluster otherwise means GPUs)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    if ray_address:
        env["RAY_ADDRESS"] = ray_address
        extra = ("--device", "cpu", *extra)
    command = [sys.executable, "-m", "rllm_train.cli", *RUN_FLAGS, "--output", str(output), *extra]
    return command, env


def rllm_train(
    output: Path, *extra: str, ray_address: str | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    command, env = command_and_env(output, extra, ray_address)
    try:
        done = subprocess.run(
            command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as expired:
        # A run alone takes about 2 minutes; under the suite's load, seen up to 7 before its
        # actors had started. What it printed says where it stood.
        said = (expired.stderr or b"")[-4000:]
        raise AssertionError(f"rllm-train ran past {timeout} s:\n{said!r}") from None
    assert done.returncode == 0, f"rllm-train failed:\n{done.stderr[-6000:]}"
    return done


def metric_rows(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def trained_rows(output: Path) -> list[dict]:
    return [row for row in metric_rows(output) if "reward_mean" in row]


def actor_weights(checkpoint: Path) -> dict:
    """The trainer's weights in verl's FSDP2 checkpoint (one process: each shard is whole)."""
    import torch

    state = torch.load(
        checkpoint / "actor" / "model_world_size_1_rank_0.pt",
        weights_only=False,
        map_location="cpu",
    )
    return {
        key: value.to_local() if hasattr(value, "to_local") else value
        for key, value in state.items()
    }


def assert_trained(rows: list[dict], steps: int) -> None:
    assert [row["step"] for row in rows] == list(range(1, steps + 1))  # each step exactly once
    for row in rows:
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row
        assert math.isfinite(row["loss"]), row
        # Rollout correction is on by default, and its metrics reach metrics.jsonl.
        assert "rollout_corr/rollout_is_mean" in row, sorted(row)
        # The trainer's log-probs of what the engine sampled equal the engine's own: the engine
        # serving step N holds the weights of update N-1.
        assert row["prob_gap_max"] < PROB_GAP_TOLERANCE, row["prob_gap_max"]


@pytest.fixture(scope="module", autouse=True)
def verl_trainer():
    require_module("ray", "the verl backend's trainer runs on Ray: pip install 'rllm-train[verl]'")


# ReMax with a LoRA adapter and a KL loss: verl's features beyond the default, in one run.
LORA_REMAX_FLAGS = (
    "--algorithm", "remax", "model.lora_rank=8", "model.lora_alpha=16", "algorithm.kl_coef=0.01",
)  # fmt: skip


def step_1_saved(output: Path) -> bool:
    latest = output / "checkpoints" / "latest_checkpointed_iteration.txt"
    logs = sorted((output / "verl_metrics").glob("attempt-*.jsonl"))
    try:
        saved = latest.read_text().strip() == "1"
        logged = bool(logs) and '"step":1,' in logs[-1].read_text().replace(" ", "")
    except OSError:
        return False
    return saved and logged


def terminated_after_step_1(output: Path, *extra: str, timeout: float = 900) -> tuple[int, str]:
    """The command on a cluster of its own, sent SIGTERM once step 1 is both checkpointed and
    in verl's step log; its exit status and stderr."""
    command, env = command_and_env(output, extra, None)
    with subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    ) as process:  # fmt: skip
        try:
            deadline = time.monotonic() + timeout
            while not step_1_saved(output):
                assert process.poll() is None, process.stderr.read()[-4000:]
                assert time.monotonic() < deadline, f"no checkpoint of step 1 in {timeout} s"
                time.sleep(0.2)
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=180)
        finally:
            if process.poll() is None:
                process.kill()
    return process.returncode, stderr


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory, verl_ray_head) -> Path:
    """Stopped by SIGTERM after step 1, then resumed to step 2 (verl's checkpoint manager,
    the adapter included)."""
    output = tmp_path_factory.mktemp("remax-lora")
    clusters_before = set(Path("/tmp").glob("rllm-ray-*"))
    status, stderr = terminated_after_step_1(  # no device, no cluster
        output, *LORA_REMAX_FLAGS, "--steps", "2", "trainer.save_every=1"
    )
    assert "CPU mode" in stderr  # chosen for the user, and said so in one line
    # As on the native backend: 128 + SIGTERM, and one line on how to go on.
    assert status == 128 + signal.SIGTERM, stderr[-4000:]
    assert stderr.rstrip().endswith("terminated by SIGTERM; continue with --resume"), stderr[-2000:]
    assert set(Path("/tmp").glob("rllm-ray-*")) <= clusters_before  # its cluster's folder went
    assert [row["step"] for row in trained_rows(output)] == [1]
    rllm_train(output, *LORA_REMAX_FLAGS, "--steps", "2", "--resume", "trainer.save_every=1",
               ray_address=verl_ray_head.address())  # fmt: skip
    return output


def test_remax_with_lora_and_a_kl_loss_trains_two_steps_across_a_resume(resumed_run):
    rows = trained_rows(resumed_run)
    assert_trained(rows, steps=2)  # the engine holds the merged adapter after each sync
    assert all(math.isfinite(row["kl_loss"]) for row in rows)
    assert rows[-1]["kl_loss"] > 0  # the policy moved away from the reference
    checkpoints = resumed_run / "checkpoints"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert len(list((resumed_run / "verl_metrics").glob("attempt-*.jsonl"))) == 2


def test_the_run_folder_is_the_native_backends(resumed_run):
    for name in NATIVE_RUN_FILES:
        assert (resumed_run / name).is_file(), name
    assert any((resumed_run / "tensorboard").iterdir())
    summary = json.loads((resumed_run / "summary.json").read_text())
    assert summary["backend"] == "verl" and summary["reported_steps"] == [1, 2]


def test_the_adapter_moved_between_checkpoints_and_the_base_did_not(resumed_run):
    import torch
    from rllm_agents.models import load_model, resolve_model

    initial = load_model(str(resolve_model("tiny"))).state_dict()
    step_1 = actor_weights(resumed_run / "checkpoints" / "global_step_1")
    step_2 = actor_weights(resumed_run / "checkpoints" / "global_step_2")
    adapter = [key for key in step_2 if "lora_" in key]
    assert adapter and step_1.keys() == step_2.keys()
    assert all(step_1[key].shape == step_2[key].shape for key in adapter)
    assert any(not torch.equal(step_1[key], step_2[key]) for key in adapter)
    # Frozen under LoRA: every base weight the checkpoint holds is the initial one.
    base = {base_key(key): key for key in step_2 if "lora_" not in key}
    shared = [name for name in base if name in initial]
    assert shared, sorted(base)[:5]
    assert all(torch.equal(step_2[base[name]], initial[name]) for name in shared)


def base_key(key: str) -> str:
    """A PEFT-wrapped weight's name in the plain model (``base_model.model.`` and
    ``.base_layer`` dropped)."""
    return key.removeprefix("base_model.model.").replace(".base_layer", "")


def test_native_refuses_remax_with_the_reason(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "rllm_train.cli", "--algorithm", "remax", "--model", "tiny",
         "--output", str(tmp_path / "run"), "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "remax runs on --backend verl only" in done.stderr
