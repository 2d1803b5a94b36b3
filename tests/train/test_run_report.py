"""What a finished ``rllm-train`` run shows a person: held-out tasks before and after training
side by side, where the curve and the trained model are, and how to browse every validation."""

from __future__ import annotations

from rllm_agents.viewer.runs import load_run
from rllm_train.cli import main
from rllm_train.run.showcase import comparisons, turns_text

from tests.train.conftest import run_overrides


def test_a_run_ends_with_the_held_out_tasks_before_and_after(tmp_path, tiny_model, capsys):
    output = tmp_path / "run"
    overrides = run_overrides(output, tiny_model, **{"trainer.steps": 1})
    overrides.pop("env.id")  # the default task: RunningTotal, three turns
    overrides["trainer.validate_held_out"] = True
    overrides["trainer.val_tasks"] = 4
    assert main(["--no-progress", *(f"{key}={value}" for key, value in overrides.items())]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Held-out tasks, greedy: step_0000 (before) and step_0001 (after)" in out
    assert "before training" in out and "after training" in out and "Start with" in out
    assert f"rllm-view {output / 'validation'}" in out
    assert f"rllm-eval --env rllm/RunningTotal-v0 --model {output / 'model'}" in out
    assert out.rstrip().endswith("(step 1)")  # the held-out line stays the last one

    # The viewer opens the validation folder as the run's: its curve and each episode's step.
    run = load_run(output / "validation")
    assert run.kind == "train" and set(run.steps) == {0, 1} and len(run.episodes) == 8


def test_the_comparison_puts_the_most_improved_tasks_first():
    from rllm_agents.types import Episode, Step, Trajectory

    def episode(task: str, rewards: list[float]) -> Episode:
        steps = [Step(observation="Start", action=str(r), reward=r) for r in rewards]
        return Episode(
            id=f"{task}:0", trajectories=[Trajectory(steps=steps)], info={"task_key": task}
        )

    before = [episode("a", [0, 0]), episode("b", [1, 0]), episode("c", [1, 1])]
    after = [episode("a", [1, 1]), episode("b", [0, 0]), episode("c", [1, 1])]
    assert [pair.task for pair in comparisons(before, after)] == ["a", "c", "b"]
    assert turns_text(after[0]).splitlines() == ["✓ '1'", "✓ '1'", "reward 2.00"]
