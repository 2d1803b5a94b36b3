"""On-policy distillation: ``--algorithm distill`` and ``distill.teacher`` mixed into RL.

The advantages are checked against tensors worked out by hand, alone and inside a real update;
a student distilled toward a teacher comes closer to it on prompts it never trained on; in
multi-turn and tool-call episodes only the student's own tokens are scored; teachers come from
model folders and run folders (LoRA too), and what cannot work is refused by name.

The random tiny model spreads its probability almost evenly over 49k tokens, so its samples
would rarely land where any teacher differs from it; the distillation test's student is the
tiny model with its logits scaled up (a few hundred tokens carry its mass, as with a trained
model), and its teacher the same model sharper still.
"""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest
import torch
from rllm_agents.agents.tool_agent import ToolAgent
from rllm_agents.models import load_model, load_tokenizer
from rllm_agents.types import Action
from rllm_envs.core.dataset_registry import DatasetRegistry
from rllm_train.cli import main
from rllm_train.config import ConfigError, build_config
from rllm_train.native import distill
from rllm_train.native.batch import TrainSequence, episodes_to_sequences, model_tokens, to_tensors
from rllm_train.native.distill_trainer import DistillTrainer
from rllm_train.native.models import load_for_training
from rllm_train.native.policy_update import PolicyUpdate
from rllm_train.native.teacher import check_teacher, load_teacher, teacher_source
from rllm_train.native.teacher_engines import check_teacher_engine
from rllm_train.native.trainers import trainer_class

from tests.benchmark_runs import run_benchmark
from tests.train import reply_length
from tests.train.conftest import run_overrides
from tests.train.test_cli_errors import assert_main_fails

ARITHMETIC = {"env.id": "rllm/Arithmetic-v0", "rollout.max_turns": 1}


def scaled_model(source: str, folder, scale: float) -> str:
    """`source` with its final norm (so its logits) multiplied by `scale`, saved to `folder`."""
    model = load_model(source)
    with torch.no_grad():
        model.model.norm.weight.mul_(scale)
    model.save_pretrained(folder)
    load_tokenizer(source).save_pretrained(folder)
    return str(folder)


def distill_overrides(output, model, teacher, **changes) -> dict:
    return run_overrides(
        output,
        model,
        **{**ARITHMETIC, "algorithm.name": "distill", "distill.teacher": str(teacher), **changes},
    )


# -- the advantages, by hand ---------------------------------------------------------------------
def test_teacher_advantages_are_the_log_prob_margin_on_generated_tokens_only():
    teacher = torch.tensor([[0.0, -1.0, -2.0, -0.5, 0.0], [0.0, -3.0, -0.25, 0.0, 0.0]])
    student = torch.tensor([[0.0, -1.5, -1.0, -0.5, -9.0], [0.0, -1.0, -0.75, -4.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 1, 1, 0, 0]], dtype=torch.float32)
    expected = torch.tensor([[0.0, 0.5, -1.0, 0.0, 0.0], [0.0, -2.0, 0.5, 0.0, 0.0]])
    assert torch.equal(distill.teacher_advantages(teacher, student, mask), expected)
    rl = torch.tensor([[0.0, 0.7, 0.7, 0.7, 0.0], [0.0, -0.7, -0.7, 0.0, 0.0]])
    mixed = distill.mixed_advantages(rl, teacher, student, mask, weight=0.5)
    assert torch.allclose(mixed, rl + 0.5 * expected)
    metrics = distill.distill_metrics(teacher, student, mask)
    # KL estimate: mean of student - teacher over the 5 generated tokens.
    assert metrics["distill/kl"] == pytest.approx((-0.5 + 1.0 + 0.0 + 2.0 - 0.5) / 5)
    assert metrics["distill/teacher_logprob_mean"] == pytest.approx(-6.75 / 5)
    assert metrics["distill/tokens"] == 5
    assert distill.sampled_reverse_kl(teacher, student, torch.zeros_like(mask)) == 0.0
    # The exact KL of identical distributions is 0, and positive otherwise.
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    assert torch.allclose(distill.exact_reverse_kl(logits, logits), torch.zeros(2), atol=1e-6)
    assert float(distill.exact_reverse_kl(logits, logits.flip(-1))[0]) > 0.5


@pytest.mark.parametrize("name", ["grpo", "distill"])
def test_the_update_adds_the_teacher_margin_to_the_algorithm_advantages(tmp_path, tiny_model, name):
    config = build_config(
        overrides=distill_overrides(
            tmp_path,
            tiny_model,
            "tiny",
            **{"algorithm.name": name, "distill.weight": 0.5, "trainer.micro_batch_size": 1},
        )
    )
    loaded = load_for_training(config, learns_values=False)
    update = PolicyUpdate(config, loaded.model, loaded.optimizer, device=loaded.device)
    sequences = [
        TrainSequence([1, 40, 41, 300, 301, 302], [0, 0, 0, 1, 1, 1], 1.0, "task/a"),
        TrainSequence([1, 40, 42, 500, 501], [0, 0, 0, 1, 1], 0.0, "task/a"),
    ]
    batch = to_tensors(sequences, loaded.pad_id)
    mask = batch.loss_mask
    teacher = torch.tensor([[0, 0, 0, -2.0, -3.0, -4.0], [0, 0, 0, -1.0, -5.0, 0]]) * mask
    batch.teacher_logprobs = teacher
    student = update.scored_logprobs(batch, 1.0)  # the weights before the update
    # GRPO on rewards 1 and 0 of one group: +-0.5 / std([1, 0]) on every generated token.
    outcome = (0.5 / (math.sqrt(0.5) + 1e-6)) * torch.tensor([[1.0], [-1.0]]) * mask
    expected = (outcome if name == "grpo" else 0) + 0.5 * (teacher - student) * mask
    metrics = update(batch, version=0, corrects=False)
    tokens = float(mask.sum())
    assert metrics["advantage_abs_mean"] == pytest.approx(float(expected.abs().sum()) / tokens)
    assert metrics["distill/kl"] == pytest.approx(
        float(((student - teacher) * mask).sum()) / tokens
    )
    assert metrics["distill/tokens"] == tokens == 5
    assert metrics["grad_norm"] > 0
    # Without the teacher's log-probs --algorithm distill has nothing to learn from: refused.
    if name == "distill":
        batch.teacher_logprobs = None
        with pytest.raises(ValueError, match="teacher's log-probs"):
            update(batch, version=1, corrects=False)


# -- it distils ----------------------------------------------------------------------------------
def held_out_prompts(tokenizer, count: int = 8) -> list[list[int]]:
    """The first `count` held-out additions (arithmetic:test), as the trainer's agent asks them."""
    env = gym.make("rllm/Arithmetic-v0")
    prompts = []
    for row in list(DatasetRegistry.load_dataset("arithmetic", "test"))[:count]:
        observation, _ = env.reset(options={"task": row})
        messages = [
            {"role": "system", "content": "You are a calculator."},
            {"role": "user", "content": observation},
        ]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


@torch.no_grad()
def held_out_kl(student, teacher, prompts, tokens: int = 8, samples: int = 4) -> float:
    """KL(student || teacher) per generated token on the held-out prompts: exact over the
    vocabulary at each position of the student's own samples (seeded), averaged."""
    student.eval()
    torch.manual_seed(0)
    values = []
    for prompt in prompts:
        ids = torch.tensor([prompt] * samples)
        sampled = student.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            top_k=0,
            top_p=1.0,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
        )
        start = len(prompt) - 1  # the logits that predict the generated tokens
        kl = distill.exact_reverse_kl(
            student(sampled).logits[:, start:-1], teacher(sampled).logits[:, start:-1]
        )
        values.append(float(kl.mean()))
    return sum(values) / len(values)


def test_a_student_moves_toward_its_teacher_on_held_out_prompts(tmp_path, tiny_model):
    student_path = scaled_model(tiny_model, tmp_path / "student", 10.0)
    teacher_path = scaled_model(student_path, tmp_path / "teacher", 2.0)
    prompts = held_out_prompts(load_tokenizer(student_path))
    teacher = load_model(teacher_path)
    before = held_out_kl(load_model(student_path), teacher, prompts)
    config = build_config(
        overrides=distill_overrides(
            tmp_path / "run",
            student_path,
            teacher_path,
            **{
                "trainer.steps": 8,
                "rollout.tasks_per_step": 4,
                "rollout.n": 4,
                "rollout.max_response_tokens": 8,
            },
        )
    )
    trainer = trainer_class(config)(config)
    assert isinstance(trainer, DistillTrainer)
    rows = trainer.train()
    after = held_out_kl(trainer.model, teacher, prompts)
    # Measured: 3.55 -> 2.31 nats per token.
    assert after < 0.8 * before, (before, after)
    kl = [row["distill/kl"] for row in rows]
    assert sum(kl[-3:]) < sum(kl[:3]), kl  # the sampled per-token KL falls in training too
    assert all(row["time/teacher_s"] > 0 and row["distill/tokens"] > 0 for row in rows)
    assert all(row["time/teacher_s"] <= row["time/update_s"] for row in rows)


# -- only the student's tokens are scored --------------------------------------------------------
def assert_scores_only_generated_tokens(trainer: DistillTrainer, row: dict) -> str:
    """The batch of the trainer's last step: the teacher's log-probs sit exactly on the tokens
    the student generated, and every other token (prompt, env, tools, template) is context.
    Returns the context text between the first and the last generated token."""
    episodes = trainer.last_episodes
    groups = [str(index // trainer.config.rollout.n) for index in range(len(episodes))]
    sequences = episodes_to_sequences(episodes, groups, trainer.config.algorithm.sequence_mode)
    batch = to_tensors(sequences, trainer.pad_id)
    scored = trainer.teacher_logprobs(batch)
    generated = sum(model_tokens(episode) for episode in episodes)
    assert float(batch.loss_mask.sum()) == generated == row["distill/tokens"]
    assert torch.all(scored[batch.loss_mask == 0] == 0)
    assert torch.all(scored[batch.loss_mask == 1] < 0)  # a log-prob on every generated token
    between = []
    for ids, mask in zip(batch.input_ids, batch.loss_mask, strict=True):
        positions = mask.nonzero().squeeze(-1)
        first, last = int(positions[0]), int(positions[-1])
        between += [int(t) for t, m in zip(ids[first:last], mask[first:last], strict=True) if not m]
    assert between, "no context tokens between the student's turns"
    return trainer.tokenizer.decode(between)


def test_multi_turn_episodes_score_only_the_students_turns(tmp_path, tiny_model):
    config = build_config(
        overrides=distill_overrides(
            tmp_path,
            tiny_model,
            tiny_model,
            **{"env.id": reply_length.LAKE_MODULE_ENV_ID, "rollout.max_turns": 3},
            **{"trainer.steps": 1, "distill.weight": 0.5},
        )
    )
    trainer = trainer_class(config)(config)
    [row] = trainer.train()
    assert all(len(e.trajectories[0].steps) >= 2 for e in trainer.last_episodes)
    assert "<|im_start|>user" in assert_scores_only_generated_tokens(trainer, row)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class CallsAddFirst(ToolAgent):
    """The tool env's agent, whose first reply is sent to the env as a call of ``add`` (the
    random tiny model writes none itself); its tokens are still the model's own."""

    def update_from_model(self, response: str, **kwargs) -> Action:
        action = super().update_from_model(response, **kwargs)
        if len(self.trajectory.steps) > 1:
            return action
        call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
        self.trajectory.steps[-1].action = call
        return Action(call)


def test_tool_call_episodes_score_only_the_students_turns(tmp_path, tiny_model):
    tools_env = {
        "env.id": "rllm/MCP-v0",
        "env.kwargs": {
            "tools": ["tests.train.test_distill:add"],
            "tasks": [{"question": "What is 2 + 3?", "answer": "5"}],
            "max_turns": 2,
        },
        "env.agent": "tests.train.test_distill:CallsAddFirst",
        "rollout.max_turns": 2,
    }
    overrides = distill_overrides(
        tmp_path, tiny_model, tiny_model, **tools_env, **{"algorithm.name": "grpo"}
    )
    config = build_config(overrides={**overrides, "trainer.steps": 1, "rollout.n": 2})
    trainer = trainer_class(config)(config)
    [row] = trainer.train()
    steps = [e.trajectories[0].steps for e in trainer.last_episodes]
    assert all(len(turns) == 2 and "tool_call" in turns[0].action for turns in steps)
    context = assert_scores_only_generated_tokens(trainer, row)
    # The tool's result, 2 + 3, came back as a tool message: context, never scored.
    assert context.count("<|im_start|>tool\n5<|im_end|>") == len(steps)


# -- where teachers come from --------------------------------------------------------------------
def test_a_lora_run_folder_is_a_teacher(tmp_path, tiny_model):
    run = tmp_path / "lora-run"
    overrides = run_overrides(
        run,
        tiny_model,
        **{"env.id": reply_length.MODULE_ENV_ID, "rollout.max_turns": 1, "model.lora_rank": 4},
    )
    config = build_config(overrides={**overrides, "trainer.steps": 1, "trainer.lr": 0.05})
    trainer_class(config)(config).train()
    source = teacher_source(str(run))
    assert source.model.name == tiny_model and source.model.lora_rank == 4
    assert source.checkpoint.endswith("state.pt")
    teacher = load_teacher(source, torch.device("cpu"))
    assert not any(p.requires_grad for p in teacher.parameters())
    # The merged teacher computes what the trained adapters on the base model compute...
    loaded = load_for_training(build_config(overrides={**overrides, "model.init_from": str(run)}),
                               learns_values=False)  # fmt: skip
    ids = torch.tensor([[1, 40, 41, 300, 301]])
    with torch.no_grad():
        assert torch.allclose(teacher(ids).logits, loaded.model(ids).logits, atol=1e-5)
        # ... which the training moved away from the base model.
        assert not torch.allclose(teacher(ids).logits, load_model(tiny_model)(ids).logits)
    # A checkpoint folder inside the run names the same teacher.
    assert teacher_source(str(run / "checkpoints")).checkpoint == source.checkpoint
    # No server holds a run's checkpoint: an openai teacher is the server's own model.
    served = {"distill.engine": "openai", "distill.base_url": "http://127.0.0.1:9/v1"}
    config = build_config(overrides=distill_overrides(tmp_path / "kd", tiny_model, run, **served))
    with pytest.raises(ConfigError, match="no server holds"):
        check_teacher_engine(config, check_teacher(config))


def test_the_cli_distils_and_reports_the_teacher(tmp_path, tiny_model, capsys):
    output = tmp_path / "run"
    argv = ["--model", tiny_model, "--algorithm", "distill", "--teacher", "tiny"]
    argv += ["--output", str(output), "--no-progress", "--env", "rllm/Arithmetic-v0"]
    argv += ["--steps", "1", "rollout.max_turns=1", "rollout.tasks_per_step=2", "rollout.n=1"]
    argv += ["rollout.max_response_tokens=4", "trainer.validate_held_out=false"]
    assert main(argv) == 0
    [row] = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    # The teacher is the student's own starting model: nothing to learn, a KL of 0.
    assert row["distill/kl"] == pytest.approx(0.0, abs=1e-4)
    assert row["distill/tokens"] > 0 and row["time/teacher_s"] > 0
    assert "reward_mean" in row
    saved = (output / "config.yaml").read_text()
    assert "distill:" in saved and "teacher: tiny" in saved


# -- refusals ------------------------------------------------------------------------------------
def test_refusals_name_the_key_and_what_works(tmp_path, tiny_model, capsys):
    output = tmp_path / "run"
    base = ["--model", "tiny", "--output", str(output)]
    assert_main_fails(capsys, [*base, "--algorithm", "distill"], "distill.teacher", "--teacher")
    teacher = ["--teacher", "tiny"]
    # verl: --algorithm distill through its table entry, a teacher mixed into RL by its rule.
    assert_main_fails(
        capsys,
        [*base, "--algorithm", "distill", *teacher, "--backend", "verl"],
        "algorithm.name",
        "native only",
        "verl 0.9.1",
    )
    assert_main_fails(capsys, [*base, *teacher, "--backend", "verl"], "distill.teacher", "verl")
    engines = "not one of local, process, vllm, llamacpp, openai"
    assert_main_fails(capsys, [*base, *teacher, "distill.engine=x"], "distill.engine", engines)
    # What a serving engine cannot do (tests/train/test_distill_served.py runs each).
    openai = [*base, *teacher, "distill.engine=openai"]
    assert_main_fails(capsys, openai, "distill.base_url", "server already running")
    assert_main_fails(
        capsys,
        [*openai, "distill.base_url=http://127.0.0.1:9/v1", "distill.api_key_env=RLLM_NO_KEY"],
        "distill.api_key_env",
        "is not set",
    )
    assert_main_fails(capsys, [*openai, "distill.slots=-1"], "distill.slots")
    llamacpp = [*base, *teacher, "distill.engine=llamacpp"]
    assert_main_fails(capsys, llamacpp, "distill.engine=llamacpp", "SmolLM2-shaped")
    assert_main_fails(capsys, [*base, *teacher, "distill.weight=0"], "distill.weight")
    assert_main_fails(
        capsys,
        [*base, *teacher, "--algorithm", "sft", "--data", str(tmp_path)],
        "distill.teacher",
        "recorded episodes",
    )
    assert_main_fails(capsys, [*base, "--teacher", str(tmp_path / "none")], "distill.teacher")
    assert not output.exists()


def test_a_teacher_with_another_vocabulary_is_refused(tmp_path, tiny_model, capsys):
    other = tmp_path / "other-vocabulary"
    load_model(tiny_model).save_pretrained(other)
    tokenizer = load_tokenizer(tiny_model)
    tokenizer.add_tokens(["<teacher-only-token>"])
    tokenizer.save_pretrained(other)
    capsys.readouterr()  # what saving the folder printed
    output = tmp_path / "run"
    argv = ["--model", tiny_model, "--teacher", str(other), "--output", str(output)]
    assert_main_fails(capsys, argv, "distill.teacher", "another tokenizer", "vocabulary")
    assert not output.exists()
    config = build_config(overrides=distill_overrides(tmp_path / "run2", tiny_model, other))
    with pytest.raises(ConfigError, match="another tokenizer"):
        DistillTrainer(config)


# -- the benchmark -------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_distill_benchmark_runs_every_side(tmp_path):
    figures = tmp_path / "figures.json"
    png = tmp_path / "distill.png"
    result = run_benchmark(
        "distill.py", "--tiny", f"--output={tmp_path / 'runs'}", f"--json={figures}",
        f"--png={png}", timeout=600,
    )  # fmt: skip
    report = json.loads(figures.read_text())
    assert set(report["sides"]) == {"distill", "grpo", "mixed"}
    for side, row in report["sides"].items():
        assert len(row["validations"]) == 3  # before, after step 1, after step 2
        assert len(row["sampled_validations"]) == 3  # val/pass@1 at the same validations
        assert row["train_minutes"] > 0
        assert (row["distill_kl_first"] is None) == (side == "grpo")
    assert report["sides"]["distill"]["distill_kl_first"] > 0  # the teacher differs
    assert png.is_file() and "held-out reward" in result.stdout
