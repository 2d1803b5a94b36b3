"""verl's FSDP2 actor update is the same whether 2 data-parallel processes compute it or 1.

One GRPO-like batch (two tasks of four replies of unequal lengths, some with env tokens outside
the loss mask; old log-probs from the model itself, so the step is on-policy) and one optimizer
step of verl's ``TrainingWorker`` with ``ppo_loss``, on a 1-process and on a 2-process worker
group in rllm's CPU mode (FSDP2 over gloo), both from the tiny model's weights. The actor is
configured as a CPU run configures it (tests/train/sharded_update.py says how).

verl hands each rank a contiguous half of the batch, so the two ranks hold 89 and 20 loss
tokens: only the normalisation by the whole batch's token count (``ppo_loss`` divides by it and
multiplies by the number of ranks, which FSDP's gradient average divides out) makes the ranks'
averaged gradient the 1-process one. Adam's first step moves almost every weight by about the
learning rate whatever the gradient's scale, so the grad norm and the policy loss are compared
too. A negative control trains the 2-process group again from the same weights with each rank
normalising by its own tokens, and shows the same checks fail it.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.parts import require_module

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
# The two groups' forwards run the same micro-batches (two sequences each) through the same
# weights: seen bitwise equal. The bound only allows for a different float kernel choice.
LOG_PROB_TOLERANCE = 1e-6
# Two processes sum the gradient in another order (each rank's micro-batches, then gloo's
# all-reduce) than one: float32 rounding, seen 5e-7 relative on the grad norm. 1e-5 leaves a
# 20x margin; a wrong normalisation moves it by percents (the control: 28%).
GRAD_NORM_RTOL = 1e-5
LOSS_RTOL = 1e-5  # the policy loss, summed over ranks: seen equal to the last bit
# Adam's first step moves each weight by lr * g / (|g| + eps), eps = 1e-8: +-lr wherever |g| is
# well above eps, which rounding cannot change, so rounding only shows in weights whose gradient
# is within rounding of zero, where the step is a sliver of lr (seen: 2.6e-4 * lr at most). A
# different gradient flips signs: steps that differ by 2 * lr (the control: in ~1e6 weights).
DELTA_RTOL = 1e-2  # of the learning rate, as the step's metrics report it
CLUSTER_TIMEOUT_S = 600  # a whole comparison takes about a minute and a half on two cores


def compare_in_cluster(model_path: str) -> dict:
    """Runs in a Ray task: imports verl there, after the CPU mode's patches (the pytest process
    never imports verl's workers)."""
    from tests.train.sharded_update import compare_updates

    return compare_updates(model_path)


@pytest.fixture(scope="module")
def cpu_mode_ray():
    """A private Ray cluster in verl's CPU mode, as ``rllm-train`` starts one for a CPU run.

    One logical GPU per training process: 1 + 2, so both groups start at once and their slow
    imports overlap. The logical CPUs cover verl's reservations (bundles and the controller).
    Ray sockets need a short folder. Yields the ``ray`` module.
    """
    # Here, not at import: collecting the suite should not import Ray and verl.
    ray = require_module(
        "ray", "the verl backend's trainer runs on Ray: pip install 'rllm-train[verl]'"
    )
    require_module("verl", "the verl backend needs rllm-train[verl]")
    from rllm_train.verl.cpu.runner import CPU_MODE_ENV

    temp_dir = tempfile.mkdtemp(prefix="rllm-ray-", dir="/tmp")
    python_path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env_vars = {
        **CPU_MODE_ENV,
        # Three training processes on a small machine: one thread each keeps them from
        # fighting over the cores (a CPU run gives its one process all of them).
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": python_path,  # the workers import tests.train.sharded_update
        "HF_HUB_OFFLINE": "1",
    }
    try:
        ray.init(
            address="local",
            num_gpus=3,
            num_cpus=32,
            _temp_dir=temp_dir,
            include_dashboard=False,
            log_to_driver=False,  # verl prints its whole config from every worker
            runtime_env={"env_vars": env_vars},
        )
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def report(cpu_mode_ray, tiny_model) -> dict:
    """What the two groups computed (tests/train/sharded_update.py: compare_updates)."""
    task = cpu_mode_ray.remote(num_cpus=1)(compare_in_cluster).remote(tiny_model)
    return cpu_mode_ray.get(task, timeout=CLUSTER_TIMEOUT_S)


def max_difference(first: dict, second: dict) -> float:
    assert first.keys() == second.keys()
    return max((first[name] - second[name]).abs().max().item() for name in first)


def relative_difference(value: float, reference: float) -> float:
    return abs(value - reference) / abs(reference)


def test_the_ranks_hold_unequal_shares_of_the_loss_tokens(report):
    # What makes the global token count matter: equal shares would hide a per-rank mean.
    first, second = report["tokens_per_rank"]
    assert first > 2 * second > 0, report["tokens_per_rank"]


def test_two_processes_compute_the_log_probs_one_does(report):
    one, two = report["log_probs"][1], report["log_probs"][2]
    assert one.shape == two.shape
    assert (one - two).abs().max().item() <= LOG_PROB_TOLERANCE


def test_two_processes_take_the_step_one_does(report):
    one, two = report["updates"][1], report["updates"][2]
    assert max_difference(one["before"], two["before"]) == 0.0  # the same starting weights
    assert math.isfinite(one["grad_norm"]) and one["grad_norm"] > 0, one["grad_norm"]
    assert relative_difference(two["grad_norm"], one["grad_norm"]) <= GRAD_NORM_RTOL, (
        one["grad_norm"],
        two["grad_norm"],
    )
    assert one["pg_loss"] != 0.0
    assert relative_difference(two["pg_loss"], one["pg_loss"]) <= LOSS_RTOL
    # The step moved the weights (by about lr: Adam's first step), and by the same amounts.
    lr = one["lr"]
    largest_step = max(delta.abs().max().item() for delta in one["delta"].values())
    assert 0.5 * lr < largest_step < 2 * lr, (largest_step, lr)
    assert max_difference(one["delta"], two["delta"]) <= DELTA_RTOL * lr


def test_a_per_rank_normalisation_would_fail_the_comparison(report):
    one, wrong = report["updates"][1], report["per_rank_mean"]
    assert max_difference(one["before"], wrong["before"]) == 0.0  # reset to the same weights
    assert relative_difference(wrong["grad_norm"], one["grad_norm"]) > 100 * GRAD_NORM_RTOL
    assert relative_difference(wrong["pg_loss"], one["pg_loss"]) > 100 * LOSS_RTOL
    assert max_difference(one["delta"], wrong["delta"]) > 10 * DELTA_RTOL * one["lr"]
