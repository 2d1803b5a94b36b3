"""reward.judge in the native trainer: a judge model's scores are the rewards trained on, on an
env with no grader (rllm/OpenEnded-v0, whose own reward is always 0)."""

from __future__ import annotations

import json
import re

import pytest
import rllm_envs  # noqa: F401  (registers the rllm/ ids)
from rllm_agents.engines.llamacpp.server import llamacpp_available
from rllm_agents.types import Episode
from rllm_train import algorithms
from rllm_train.config import ConfigError, build_config
from rllm_train.native.batch import TensorBatch
from rllm_train.native.trainer import NativeTrainer

from tests.parts import require_part
from tests.train.conftest import run_overrides


class RecordingTrainer(NativeTrainer):
    """The native trainer, keeping each update's batch to compare with the judge's log."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[TensorBatch] = []

    def update(self, batch: TensorBatch) -> dict[str, float]:
        self.batches.append(batch)
        return super().update(batch)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.llamacpp
def test_group_judged_rewards_are_what_the_advantages_come_from(tmp_path, tiny_model):
    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    output = tmp_path / "run"
    overrides = run_overrides(
        output,
        tiny_model,
        **{
            "env.id": "rllm/OpenEnded-v0",
            "reward.judge.mode": "group",  # engine: llama.cpp serving SmolLM2, the default
            "reward.judge.rubric": "The reply does what the prompt asks, in plain words.",
            "trainer.save_episodes": True,
            "trainer.steps": 1,
        },
    )
    trainer = RecordingTrainer(build_config(overrides=overrides))
    rows = trainer.train()
    assert len(rows) == len(trainer.batches) == 1
    for step, (row, batch) in enumerate(zip(rows, trainer.batches, strict=True), start=1):
        episodes = [
            Episode.from_dict(record)
            for record in read_jsonl(output / "episodes" / f"step_{step:04d}.jsonl")
        ]
        calls = read_jsonl(output / "judge" / f"step_{step:04d}.jsonl")
        # One call per task (2 tasks x 2 samples), each scoring its group's two episodes.
        assert [call["mode"] for call in calls] == ["group", "group"]
        assert row["judge/calls"] == 2 and row["judge/failed"] == 0
        scores = []
        for episode in episodes:
            judged = episode.info["judge"]
            call = calls[judged["call"]]
            position = call["episode_ids"].index(episode.id)
            assert judged["score"] == call["scores"][position]
            assert judged["env_reward"] == 0.0  # the env grades nothing
            assert episode.reward == judged["score"]  # use=replace, weight 1
            scores.append(judged["score"])
        # SmolLM2's constrained replies parse: real scores, not the default.
        assert row["judge/parse_failures"] == 0, [call["reply"] for call in calls]
        assert row["reward_mean"] == pytest.approx(row["judge/score_mean"])
        # The batch trained on carries the judge's scores, episode by episode ...
        assert batch.rewards.tolist() == pytest.approx(scores)
        # ... and the advantages of the update are GRPO's on those scores.
        advantages, _ = algorithms.compute_advantages(
            trainer.settings, batch.rewards, batch.loss_mask, batch.groups
        )
        tokens = float(batch.loss_mask.sum())
        expected = float((advantages.abs() * batch.loss_mask).sum()) / tokens
        assert row["advantage_abs_mean"] == pytest.approx(expected, abs=1e-6)
        spread = any(
            len({s for s, e in zip(scores, episodes, strict=True) if e.info["seed"] == seed}) > 1
            for seed in {e.info["seed"] for e in episodes}
        )
        assert (row["advantage_abs_mean"] > 0) == spread
        assert row["time/judge_s"] > 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trainer.backend": "verl"}, "reward.judge.mode: the judge scores episodes in the native"),
        ({"algorithm.name": "sft", "sft.data": ["x.jsonl"]}, "reward.judge.mode: --algorithm sft"),
        ({"reward.judge.engine": "openai"}, "reward.judge.base_url"),
        ({"reward.judge.rubric": "a", "reward.judge.rubric_file": "r.txt"}, "give the rubric once"),
        ({"reward.judge.rubric_file": "missing.txt"}, "reward.judge.rubric_file: no such file"),
        ({"reward.judge.use": "multiply"}, "reward.judge.use: 'multiply' is not one of"),
        ({"reward.judge.default_score": 5}, "reward.judge.default_score: must be from 0 to 1"),
        ({"reward.judge.prompt_file": "missing.yaml"}, "reward.judge.prompt_file"),
    ],
)
def test_judge_settings_that_cannot_work_are_refused_naming_the_key(changes, message, tmp_path):
    overrides = {"reward.judge.mode": "group", "trainer.output": str(tmp_path / "run"), **changes}
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_config(overrides=overrides)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"env.id": "kuhn_poker_v0"}, "reward.judge.mode: a multi-agent game"),
        (
            {"reward.judge.engine": "openai", "reward.judge.base_url": "http://127.0.0.1:9/v1",
             "reward.judge.api_key_env": "RLLM_TEST_NO_SUCH_KEY"},
            "reward.judge.api_key_env: $RLLM_TEST_NO_SUCH_KEY is not set",
        ),
        ({"reward.judge.rubric_file": "EMPTY"}, "is empty"),
    ],
)  # fmt: skip
def test_runs_the_judge_cannot_serve_are_refused_before_any_model_loads(
    changes, message, tmp_path, monkeypatch
):
    monkeypatch.delenv("RLLM_TEST_NO_SUCH_KEY", raising=False)
    empty = tmp_path / "rubric.txt"
    empty.write_text("  \n")
    changes = {k: str(empty) if v == "EMPTY" else v for k, v in changes.items()}
    # A model that does not exist: a refusal after the model loads would fail otherwise.
    overrides = run_overrides(
        tmp_path / "run", "no-such-model", **{"reward.judge.mode": "group", **changes}
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        NativeTrainer(build_config(overrides=overrides))
