"""A full disk is one line, exit 1, and a run that resumes once there is room.

Each test writes its run onto a small tmpfs of its own (mounting one needs root, as the
suite's Docker engine does), fills it for real, then grows it as a user would free space,
and resumes. torch.save reports a full disk as a RuntimeError of its stream, and the
reward-curve plot written on the way out fails again: both end as the same line.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from rllm_agents.cli.eval import main as rllm_eval
from rllm_train.cli import main as rllm_train

from tests.parts import require_part

# Room for a run's config and first rows, not for a checkpoint of the tiny model (about 25 MB
# with its optimizer state) nor for many episodes.
SMALL = "600k"
ROOMY = "400m"
FULL_DISK_LINE = "the disk is full: writing under {} failed (0 B free there); free space, then"


def mount(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of SMALL bytes; grow it with ``small_disk.grow()``."""
    point = tmp_path / "disk"
    point.mkdir()
    mounted = mount(["-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs", str(point)])
    require_part(mounted.returncode == 0, f"cannot mount a tmpfs here: {mounted.stderr.strip()}")

    class Disk:
        path = point

        @staticmethod
        def grow() -> None:
            assert mount(["-o", f"remount,size={ROOMY}", str(point)]).returncode == 0

    try:
        yield Disk
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def last_line(capsys) -> str:
    """What the command said last on stderr (before it, only the model loader's progress)."""
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return captured.err.strip().splitlines()[-1]


def test_rllm_train_on_a_full_disk_says_so_in_one_line_and_resumes(small_disk, capsys):
    run = small_disk.path / "run"
    argv = ["--model", "tiny", "--output", str(run), "--steps", "2", "--no-progress"]
    argv += ["trainer.save_every=1", "trainer.validate_held_out=false", "model.lora_rank=0"]
    assert rllm_train(argv) == 1
    line = last_line(capsys)
    assert line.startswith("rllm-train: " + FULL_DISK_LINE.format(run)), line
    assert line.endswith("continue with --resume")
    small_disk.grow()
    assert rllm_train([*argv, "--resume"]) == 0
    steps = [json.loads(row)["step"] for row in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # each step once: nothing lost to the full disk, nothing doubled


def test_rllm_eval_on_a_full_disk_says_so_in_one_line_and_resumes(small_disk, capsys):
    run = small_disk.path / "run"
    filler = small_disk.path / "filler"
    filler.write_bytes(b"\0" * (600 * 1024 - 16 * 1024))  # a few episodes' room left
    argv = ["--env", "rllm/FrozenLake-v0", "--model", "tiny", "--n", "2", "--num-tasks", "8"]
    argv += ["--max-tokens", "4", "--max-turns", "2", "--no-progress", "--output", str(run)]
    assert rllm_eval(argv) == 1
    line = last_line(capsys)
    assert line.startswith("rllm-eval: " + FULL_DISK_LINE.format(run)), line
    small_disk.grow()
    assert rllm_eval([*argv, "--resume"]) == 0
    capsys.readouterr()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == 16 and summary["infra_failures"] == 0
    lines = (run / "episodes.jsonl").read_text().splitlines()
    assert len({json.loads(line)["id"] for line in lines}) == len(lines) == 16
