"""``rllm-train --resume`` never drops a whole row of ``metrics.jsonl``.

A finished two-step native run (a checkpoint at each step) is resumed after its log was
damaged: a damaged line stops the resume in one line naming ``file:line`` before the model
loads; ``--repair`` moves it beside the log and the run goes on with every whole row kept byte
for byte; a row cut short or missing, whose step has a checkpoint (so it never plays again),
comes back from that checkpoint. verl's step logs, read the same way, are checked here too.
"""

from __future__ import annotations

import shutil

import pytest
from rllm_envs.core.json_lines import DamagedLineError
from rllm_train.cli import main
from rllm_train.verl.metrics_bridge import read_attempts

from tests.cli_errors import assert_one_line_error
from tests.train import reply_length
from tests.train.conftest import run_overrides
from tests.train.resume_runs import latest_step

PROG = "rllm-train"
NOT_UTF8 = b'{"step": \xff\xfe}\n'


def argv(output, model, *flags: str, steps: int = 2) -> list[str]:
    overrides = run_overrides(
        output,
        model,
        **{
            "env.id": reply_length.MODULE_ENV_ID,
            "trainer.steps": steps,
            "trainer.save_every": 1,
            "trainer.keep_checkpoints": 1,
            "trainer.tensorboard": False,
        },
    )
    return [*flags, *(f"{key}={value}" for key, value in overrides.items())]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model):
    output = tmp_path_factory.mktemp("finished") / "run"
    assert main(argv(output, tiny_model)) == 0
    return output


@pytest.fixture
def run(finished_run, tmp_path):
    """A copy of the finished run (its log as written: two rows)."""
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def log_lines(output) -> list[bytes]:
    return (output / "metrics.jsonl").read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("damage", [b"garbage{\n", NOT_UTF8])
def test_a_damaged_line_stops_the_resume_in_one_line(run, tiny_model, capsys, damage):
    first, second = log_lines(run)
    damaged = first + damage + second
    (run / "metrics.jsonl").write_bytes(damaged)
    code = main(argv(run, tiny_model, "--resume", steps=3))
    err = capsys.readouterr().err
    assert_one_line_error(code, err, PROG, f"{run / 'metrics.jsonl'}:2: not ", "--repair")
    assert (run / "metrics.jsonl").read_bytes() == damaged  # refused: nothing touched
    assert latest_step(run) == 2


def test_repair_moves_the_damaged_lines_aside_and_the_run_goes_on(run, tiny_model, capsys):
    first, second = log_lines(run)
    (run / "metrics.jsonl").write_bytes(first + b"garbage{\n" + second + NOT_UTF8)
    assert main(argv(run, tiny_model, "--resume", "--repair", steps=3)) == 0
    log = run / "metrics.jsonl"
    assert f"{PROG}: --repair: moved 2 damaged lines of {log} to {log}.damaged" in (
        capsys.readouterr().out
    )
    assert (run / "metrics.jsonl.damaged").read_bytes() == b"garbage{\n" + NOT_UTF8
    lines = log_lines(run)
    assert lines[:2] == [first, second] and len(lines) == 3 and b'{"step": 3,' in lines[2]
    assert latest_step(run) == 3


@pytest.mark.parametrize("loss", ["last row cut short", "first row missing"])
def test_a_lost_row_comes_back_from_its_checkpoint(run, tiny_model, loss):
    first, second = log_lines(run)
    lost = first + second[: len(second) // 2] if loss == "last row cut short" else second
    (run / "metrics.jsonl").write_bytes(lost)
    assert main(argv(run, tiny_model, "--resume")) == 0
    assert log_lines(run) == [first, second]


def test_repair_is_refused_without_resume(tmp_path, tiny_model, capsys):
    code = main(argv(tmp_path / "run", tiny_model, "--repair"))
    assert_one_line_error(code, capsys.readouterr().err, PROG, "--repair", "--resume")
    assert not (tmp_path / "run").exists()


def test_verl_step_logs_keep_every_whole_line_and_name_a_damaged_one(tmp_path):
    cut = tmp_path / "attempt-001.jsonl"
    cut.write_bytes(b'{"step": 1, "data": {"a": 1}}\n{"step": 2, "da')
    later = tmp_path / "attempt-002.jsonl"
    later.write_bytes(b'{"step": 2, "data": {"a": 2}}\n{"step": 3, "data": {"a": 3}}\n')
    assert read_attempts(tmp_path) == {1: {"a": 1}, 2: {"a": 2}, 3: {"a": 3}}
    later.write_bytes(b'{"step": 2, "data": {"a": 2}}\n\xff\xfe\n{"step": 3, "data": {"a": 3}}\n')
    with pytest.raises(DamagedLineError, match=r"attempt-002.jsonl:2: not UTF-8"):
        read_attempts(tmp_path)
