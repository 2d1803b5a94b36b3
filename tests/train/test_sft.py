"""``rllm-train --algorithm sft``: fine-tuning on the best recorded episodes, then RL from it.

The episodes are recorded by ``rllm-eval`` with the tiny model on a multi-turn lake whose reward
is the reply's length, so their rewards differ and a threshold keeps some and drops others,
and every conversation has env tokens between the model's turns that must carry no loss.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from rllm_agents.cli.eval import main as eval_main
from rllm_agents.models import load_model
from rllm_agents.types import Episode
from rllm_train.cli import main
from rllm_train.config import ConfigError, build_config
from rllm_train.native import checkpoint
from rllm_train.native.sft import SFTTrainer, batch_indices
from rllm_train.native.sft_data import select_trajectories, sft_sequences
from rllm_train.native.trainer import NativeTrainer
from transformers import AutoTokenizer

from tests.train import reply_length
from tests.train.conftest import run_overrides
from tests.train.test_cli_errors import assert_main_fails

MIN_REWARD = 2.2  # of the recorded rewards (2.08 to 2.56), some pass and some do not


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, tiny_model):
    """An rllm-eval run folder: 6 three-turn lake episodes of the tiny model."""
    output = tmp_path_factory.mktemp("eval") / "run"
    code = eval_main(
        [
            "--env",
            reply_length.LAKE_MODULE_ENV_ID,
            "--model",
            tiny_model,
            "--n",
            "2",
            "--num-tasks",
            "3",
            "--max-turns",
            "3",
            "--max-tokens",
            "6",
            "--output",
            str(output),
            "--no-progress",
        ]  # fmt: skip
    )
    assert code == 0
    return output


def recorded_episodes(folder) -> list[Episode]:
    lines = (folder / "episodes.jsonl").read_text().splitlines()
    return [Episode.from_json(line) for line in lines]


def sft_overrides(output, model, data, **changes) -> dict:
    return run_overrides(
        output,
        model,
        **{
            "algorithm.name": "sft",
            "env.id": reply_length.LAKE_MODULE_ENV_ID,
            "sft.data": [str(data)],
            "sft.min_reward": MIN_REWARD,
            "sft.batch_size": 2,
            "trainer.steps": 3,
            "trainer.micro_batch_size": 2,
            **changes,
        },
    )


def test_sft_lowers_the_loss_on_the_best_episodes_and_rl_starts_from_it(
    tmp_path, tiny_model, recorded, capsys
):
    rewards = [episode.reward for episode in recorded_episodes(recorded)]
    passing = sum(reward >= MIN_REWARD for reward in rewards)
    assert 0 < passing < len(rewards), rewards

    sft_run = tmp_path / "sft"
    overrides = sft_overrides(sft_run, tiny_model, recorded)
    argv = ["--algorithm", "sft", "--data", str(recorded)]
    argv += [f"{key}={value}" for key, value in overrides.items() if key != "sft.data"]
    assert main(argv) == 0
    assert "loss on them" in capsys.readouterr().out
    rows = [json.loads(line) for line in (sft_run / "metrics.jsonl").read_text().splitlines()]
    start, *steps = rows
    assert start["step"] == 0 and start["sft/trajectories"] == passing
    assert start["sft/trajectories_recorded"] == len(rewards)
    assert [row["step"] for row in steps] == [1, 2, 3]
    # Every trained sequence passed the threshold; the loss on them went down.
    assert all(row["reward_mean"] >= MIN_REWARD for row in steps)
    assert all(math.isfinite(row["loss"]) and row["grad_norm"] > 0 for row in steps)
    assert steps[-1]["sft/probe_loss"] < start["sft/probe_loss"] - 0.2
    summary = json.loads((sft_run / "summary.json").read_text())
    assert summary["sft_probe_loss_last"] == steps[-1]["sft/probe_loss"]

    # RL from the fine-tuned weights: the run folder is an RL run's, --init-from reads it.
    rl_run = tmp_path / "rl"
    config = build_config(
        overrides=run_overrides(
            rl_run,
            tiny_model,
            **{
                "env.id": reply_length.LAKE_MODULE_ENV_ID,
                "model.init_from": str(sft_run),
                "trainer.steps": 1,
                "rollout.max_turns": 2,
            },
        )
    )
    trainer = NativeTrainer(config)
    saved = torch.load(checkpoint.checkpoint_file(sft_run), weights_only=False)["model"]
    weights = trainer.model.state_dict()
    assert all(torch.equal(weights[name], tensor) for name, tensor in saved.items())
    # ... which are not the model's own: fine-tuning moved every one of them.
    base = load_model(tiny_model).state_dict()
    assert not any(torch.equal(base[name], tensor) for name, tensor in saved.items())
    [row] = trainer.train()
    assert row["step"] == 1 and math.isfinite(row["loss"])
    assert (rl_run / "checkpoints" / "latest").read_text().strip() == "step_1"


def test_only_the_models_tokens_carry_the_loss(tmp_path, tiny_model, recorded):
    config = build_config(
        overrides=sft_overrides(tmp_path / "run", tiny_model, recorded, **{"sft.min_reward": 0})
    )
    trainer = SFTTrainer(config)
    episodes = recorded_episodes(recorded)
    assert len(trainer.sequences) == len(episodes)  # one whole conversation each
    for sequence, episode in zip(trainer.sequences, episodes, strict=True):
        trajectory = episode.trajectories[0]
        trained = [t for t, m in zip(sequence.token_ids, sequence.loss_mask, strict=True) if m]
        # Exactly the model's three completions, in order: no prompt, observation or glue.
        assert trained == [i for step in trajectory.steps for i in step.response_ids]
        assert sum(sequence.loss_mask[: len(trajectory.prompt_ids)]) == 0
        assert 0 in sequence.loss_mask[len(trajectory.prompt_ids) :]  # env turns in between

    # The loss is Hugging Face's causal-LM loss with every other token's label ignored.
    sequences = trainer.sequences[:3]
    width = max(len(sequence.token_ids) for sequence in sequences)
    input_ids = torch.full((len(sequences), width), trainer.pad_id)
    attention = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for row, sequence in enumerate(sequences):
        ids = torch.tensor(sequence.token_ids)
        input_ids[row, : len(ids)] = ids
        attention[row, : len(ids)] = 1
        mask = torch.tensor(sequence.loss_mask, dtype=torch.bool)
        labels[row, : len(ids)] = torch.where(mask, ids, torch.tensor(-100))
    with torch.no_grad():
        expected = trainer.model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
    assert trainer.loss_on(sequences) == pytest.approx(float(expected), rel=1e-4)


def test_episodes_without_token_ids_are_rendered_with_the_chat_template(
    tmp_path, tiny_model, recorded
):
    # What an OpenAI-compatible server that returns no token ids leaves: text and messages.
    episodes = recorded_episodes(recorded)
    for episode in episodes:
        for trajectory in episode.trajectories:
            trajectory.prompt_ids, trajectory.response_ids, trajectory.response_mask = [], [], []
            for step in trajectory.steps:
                step.prompt_ids, step.response_ids = [], []
    text_only = tmp_path / "text_only.jsonl"
    text_only.write_text("".join(episode.to_json() + "\n" for episode in episodes))
    settings = build_config(
        overrides={"algorithm.name": "sft", "sft.data": [str(text_only)], "sft.min_reward": 0}
    ).sft
    chosen, counts = select_trajectories(settings)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    data = sft_sequences(chosen, tokenizer, "trajectory", False, len(tokenizer))
    assert data.retokenized == counts.selected == len(episodes)
    turns = [step for episode in episodes for step in episode.trajectories[0].steps]
    assert len(data.sequences) == len(turns)  # one sequence per turn
    for sequence, step in zip(data.sequences, turns, strict=True):
        prompt = sequence.token_ids[: sequence.loss_mask.index(1)]
        trained = [t for t, m in zip(sequence.token_ids, sequence.loss_mask, strict=True) if m]
        assert tokenizer.decode(prompt).endswith(
            step.chat_completions[-2]["content"] + "<|im_end|>\n<|im_start|>assistant\n"
        )
        assert tokenizer.decode(trained) == step.model_response + (
            "" if step.finish_reason == "length" else tokenizer.eos_token
        )


def test_batches_cover_each_epoch_once_in_a_seeded_order():
    steps = [batch_indices(5, 2, seed=3, step=step) for step in range(5)]
    flat = [index for batch in steps for index in batch]
    assert sorted(flat[:5]) == sorted(flat[5:]) == list(range(5))
    assert flat[:5] != flat[5:] or flat[:5] != list(range(5))
    assert batch_indices(5, 2, seed=3, step=2) == steps[2]  # a resumed run sees the same


def test_refusals_name_the_problem_and_leave_no_run_folder(tmp_path, capsys, recorded):
    output = tmp_path / "run"
    base = ["--model", "tiny", "--output", str(output)]
    sft = [*base, "--algorithm", "sft"]
    assert_main_fails(capsys, sft, "sft.data", "--data")
    assert_main_fails(capsys, [*sft, "--data", str(tmp_path / "none")], "no such file")
    assert_main_fails(capsys, [*sft, "--data", str(tmp_path)], "holds no episodes")
    assert_main_fails(
        capsys, [*sft, "--data", str(recorded), "sft.min_reward=9"], "none of the 6", "best has"
    )
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a"}\nnot json\n')
    assert_main_fails(capsys, [*sft, "--data", str(broken)], f"{broken}:2")
    assert_main_fails(capsys, [*sft, "--data", str(recorded), "--backend", "verl"], "native only")
    assert_main_fails(capsys, [*base, "--data", str(recorded)], "--algorithm sft")
    assert_main_fails(capsys, [*base, "--init-from", str(tmp_path)], "model.init_from")
    assert not output.exists()
    with pytest.raises(ConfigError, match="verl backend"):
        build_config(overrides={"model.init_from": str(tmp_path), "trainer.backend": "verl"})


def test_episodes_of_validation_tasks_are_left_out(recorded):
    settings = build_config(overrides=settings_overrides(recorded)).sft
    first_task = recorded_episodes(recorded)[0].task["task_id"]
    chosen, counts = select_trajectories(settings, frozenset({first_task}))
    assert counts.held_out == 2 and counts.selected == len(chosen) == 4  # 2 samples a task
    assert all(item.trajectory.task["task_id"] != first_task for item in chosen)
    best, _ = select_trajectories(
        build_config(overrides={**settings_overrides(recorded), "sft.best_per_task": True}).sft
    )
    assert len(best) == 3  # one per task
    for item in best:
        rivals = [e.reward for e in recorded_episodes(recorded) if e.task == item.trajectory.task]
        assert item.trajectory.reward == max(rivals)


def test_a_train_run_folder_with_saved_episodes_is_data(recorded, tmp_path):
    # rllm-train with trainer.save_episodes writes OUTPUT/episodes/step_N.jsonl: the same
    # episodes split over two steps select the same trajectories, named by step file and line.
    lines = (recorded / "episodes.jsonl").read_text().splitlines(keepends=True)
    steps = tmp_path / "train" / "episodes"
    steps.mkdir(parents=True)
    (steps / "step_0001.jsonl").write_text("".join(lines[:3]))
    (steps / "step_0002.jsonl").write_text("".join(lines[3:]))
    from_eval, _ = select_trajectories(build_config(overrides=settings_overrides(recorded)).sft)
    train = {**settings_overrides(recorded), "sft.data": [str(tmp_path / "train")]}
    from_train, counts = select_trajectories(build_config(overrides=train).sft)
    assert counts.episodes == len(lines) and len(from_train) == len(from_eval)
    assert [item.trajectory.reward for item in from_train] == [
        item.trajectory.reward for item in from_eval
    ]
    assert from_train[-1].source == f"{steps / 'step_0002.jsonl'}:{len(lines) - 3}"


def settings_overrides(recorded) -> dict:
    return {"algorithm.name": "sft", "sft.data": [str(recorded)], "sft.min_reward": 0}
