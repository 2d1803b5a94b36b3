"""``trainer.save_episodes``: every step's sampled episodes in the run folder, replayable."""

from __future__ import annotations

from rllm_agents.episodes import ReadReport, read_episodes, replay_episodes
from rllm_train.config import build_config
from rllm_train.native.trainer import NativeTrainer

from tests.train.conftest import run_overrides


def test_each_step_writes_its_episodes_with_tokens_and_the_weights_version(tmp_path, tiny_model):
    output = tmp_path / "run"
    config = build_config(
        overrides=run_overrides(output, tiny_model, **{"trainer.save_episodes": True})
    )
    NativeTrainer(config).train()
    report = ReadReport()
    episodes = list(read_episodes(output, report))
    assert [path.name for path in report.files] == ["step_0001.jsonl", "step_0002.jsonl"]
    assert len(episodes) == 2 * 4  # 2 steps of 2 tasks x 2 samples
    assert [e.policy["version"] for e in episodes] == ["step-0"] * 4 + ["step-1"] * 4
    for episode in episodes:
        trajectory = episode.trajectories[0]
        assert trajectory.response_ids and len(trajectory.response_mask) == len(
            trajectory.response_ids
        )
        assert episode.env.id == "rllm/Arithmetic-v0" and episode.env.transitions
    assert all(result.identical for result in replay_episodes(episodes))
