"""``trainer.save_episodes``: every step's sampled episodes in the run folder, replayable, and
read as they are by ``rllm-view`` (with each episode's step) and ``--algorithm sft --data``."""

from __future__ import annotations

from rllm_agents.episodes import ReadReport, read_episodes, replay_episodes
from rllm_agents.viewer.runs import episode_rows, load_run
from rllm_train.config import build_config
from rllm_train.native.sft_data import select_trajectories
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

    # The viewer shows the run's episodes beside its curve, each with its step.
    run = load_run(output)
    assert (run.kind, run.steps) == ("train", [1] * 4 + [2] * 4)
    assert [point["step"] for point in run.metrics if "reward_mean" in point] == [1, 2]
    assert [row["step"] for row in episode_rows(run)] == run.steps
    # And SFT takes the run folder as its data.
    every = {"algorithm.name": "sft", "sft.data": [str(output)], "sft.min_reward": -100}
    chosen, counts = select_trajectories(build_config(overrides=every).sft)
    assert counts.episodes == 8 and len(chosen) == 8
    assert chosen[-1].source.startswith(str(output / "episodes" / "step_0002.jsonl:"))
