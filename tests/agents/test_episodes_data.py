"""Episodes as data: the record reads back from any run, replays and re-scores with no model.

The Math run here is a real ``rllm-eval`` run against a loopback OpenAI server whose "model"
answers half the questions right (it looks the answer up) and the rest wrong.
"""

from __future__ import annotations

import json
import zlib

import pytest
from rllm_agents.cli.eval import main
from rllm_agents.episodes import EpisodeFileError, ReadReport, read_episodes, rescore
from rllm_agents.testing.fault_server import FaultServer
from rllm_agents.types import EPISODE_FORMAT_VERSION, Episode

from tests.envs.golden.record import golden_path

NUM_TASKS = 6


def half_right(body: dict) -> str:
    """Right on the questions whose text hashes even, a wrong number on the others."""
    import gymnasium as gym
    import rllm_envs  # noqa: F401

    question = body["messages"][-1]["content"]
    rows = gym.make("rllm/Math-v0", tasks="shipped:gsm8k_test").unwrapped.tasks
    answer = next(row["answer"] for row in rows if row["question"] in question)
    right = zlib.crc32(question.encode()) % 2 == 0
    return f"The answer is \\boxed{{{answer if right else '-7'}}}."


@pytest.fixture(scope="module")
def math_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("math") / "run"
    with FaultServer(completion=half_right) as server:
        code = main(["--env", "rllm/Math-v0", "--split", "gsm8k_test", "--num-tasks",
                     str(NUM_TASKS), "--base-url", server.base_url, "--model", "canned",
                     "--output", str(run), "--no-progress"])  # fmt: skip
    assert code == 0
    return run


def test_an_eval_run_records_env_policy_and_every_step(math_run):
    episodes = list(read_episodes(math_run))
    assert len(episodes) == NUM_TASKS
    grades = {episode.is_correct for episode in episodes}
    assert grades == {True, False}  # both kinds, so agreement below means something
    for episode in episodes:
        assert episode.format_version == EPISODE_FORMAT_VERSION
        assert episode.policy == {"name": "canned", "engine": "openai",
                                  "base_url": episode.policy["base_url"]}  # fmt: skip
        record = episode.env
        assert (record.api, record.id) == ("gymnasium", "rllm/Math-v0")
        assert record.kwargs["tasks"] == "shipped:gsm8k_test"
        assert record.options["task"] == episode.task
        [step] = record.transitions
        assert step.action == episode.trajectories[0].steps[0].action
        assert step.reward == episode.reward and step.terminated is True
        assert step.info["is_correct"] is episode.is_correct
        assert episode.timings["finished_at"] >= episode.timings["started_at"]


def test_replay_of_the_run_finds_no_difference(math_run, capsys):
    assert main(["replay", str(math_run)]) == 0
    record = json.loads((math_run / "replay.json").read_text())
    assert (record["episodes"], record["identical"]) == (NUM_TASKS, NUM_TASKS)


def test_rescore_agrees_with_the_recorded_grades_and_flags_a_planted_disagreement(
    math_run, tmp_path, capsys
):
    assert main(["rescore", str(math_run), "--grader", "math"]) == 0
    summary = json.loads((math_run / "rescore" / "math.summary.json").read_text())
    assert (summary["agree"], summary["disagree"], summary["errors"]) == (NUM_TASKS, 0, 0)

    # Plant a disagreement: one right answer recorded as wrong.
    lines = (math_run / "episodes.jsonl").read_text().splitlines()
    planted = next(i for i, line in enumerate(lines) if json.loads(line)["is_correct"])
    record = json.loads(lines[planted])
    record["is_correct"] = False
    record["trajectories"][0]["reward"] = 0.0
    lines[planted] = json.dumps(record)
    run = tmp_path / "planted"
    run.mkdir()
    (run / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["rescore", str(run)]) == 1  # the default grader: Math's own
    out = capsys.readouterr().out
    assert "1 disagreement(s)" in out and "DISAGREES" in out
    rows = [json.loads(line) for line in (run / "rescore" / "env.jsonl").read_text().splitlines()]
    [bad] = [row for row in rows if not row["agrees"]]
    assert bad["episode_id"] == record["id"]
    assert (bad["old_reward"], bad["new_reward"], bad["new_correct"]) == (0.0, 1.0, True)


def test_rescore_with_a_reward_function_from_a_file(math_run, tmp_path):
    grader = tmp_path / "strict.py"
    grader.write_text("def no_credit(episode):\n    return {'reward': 0.0, 'is_correct': False}\n")
    rows = rescore(read_episodes(math_run), f"{grader}:no_credit")
    assert [row.agrees for row in rows] == [not e.is_correct for e in read_episodes(math_run)]


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, math_run):
    assert main(["replay", str(tmp_path / "nothing")]) == 2
    assert "no such file or run folder" in capsys.readouterr().err
    assert main(["replay", str(tmp_path)]) == 2
    assert "holds no episodes" in capsys.readouterr().err
    assert main(["rescore", str(math_run), "--grader", "telepathy"]) == 2
    assert "not one of env, math, code, replay" in capsys.readouterr().err
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text('{"id": "a"}\n{not json}\n{"id": "b"}\n')
    assert main(["replay", str(damaged)]) == 2
    assert "damaged.jsonl:2: not a JSON record" in capsys.readouterr().err


def test_a_line_cut_short_by_a_kill_is_skipped_and_reported(tmp_path):
    whole = golden_path("rllm/Math-v0").read_text()
    cut = tmp_path / "episodes.jsonl"
    cut.write_text(whole + whole[: len(whole) // 2])  # the second line has no end
    report = ReadReport()
    episodes = list(read_episodes(tmp_path, report))
    assert len(episodes) == 1 and report.cut_lines == [f"{cut}:2"]
    assert "skipped a cut-short last line" in report.describe()


def test_version_1_records_read_and_newer_ones_are_refused(tmp_path):
    old = Episode.from_dict({"id": "t:0", "task": {"question": "q"}, "trajectories": []})
    assert old.format_version == 1 and old.env is None
    newer = tmp_path / "episodes.jsonl"
    newer.write_text(json.dumps({"id": "x", "format_version": EPISODE_FORMAT_VERSION + 1}) + "\n")
    with pytest.raises(EpisodeFileError, match="newer than this rllm reads"):
        list(read_episodes(newer))


def test_an_old_record_is_not_replayable_and_says_why(tmp_path, capsys):
    (tmp_path / "episodes.jsonl").write_text(json.dumps({"id": "t:0", "trajectories": []}) + "\n")
    assert main(["replay", str(tmp_path)]) == 0
    assert "not replayable: no env record" in capsys.readouterr().out


def test_train_run_folders_read_step_by_step(tmp_path):
    folder = tmp_path / "episodes"
    folder.mkdir()
    line = golden_path("rllm/Arithmetic-v0").read_text()
    for step in (10, 2):  # numeric order, not the names' order
        (folder / f"step_{step:04d}.jsonl").write_text(line)
    report = ReadReport()
    assert len(list(read_episodes(tmp_path, report))) == 2
    assert [path.name for path in report.files] == ["step_0002.jsonl", "step_0010.jsonl"]


def test_code_rescore_runs_the_recorded_final_program_in_the_sandbox():
    [episode] = read_episodes(golden_path("rllm/Code-v0"))
    [row] = rescore([episode], "env")
    if row.error and "cannot make" in row.error:
        from tests.parts import require_part

        require_part(False, f"rllm/Code-v0's sandbox: {row.error}")
    assert (row.grader, row.error, row.agrees) == ("code", None, True)
    assert (row.new_reward, row.new_correct) == (0.0, False)  # print(input()) is not a solution
    episode.trajectories[0].reward, episode.is_correct = 1.0, True  # planted
    [planted] = rescore([episode], "code")
    assert not planted.agrees and planted.new_reward == 0.0


def test_swe_rescore_replays_the_recorded_edits_and_submit_in_a_new_container():
    # The golden SWE episode lists the repo and submits it unchanged: the hidden tests fail.
    [episode] = read_episodes(golden_path("rllm/SWE-v0"))
    planted = Episode.from_dict(episode.to_dict())
    planted.trajectories[0].reward, planted.is_correct = 1.0, True
    rows = rescore([episode, planted], "env")
    if any(row.error and "cannot make" in row.error for row in rows):
        from tests.parts import require_part

        require_part(False, f"rllm/SWE-v0's container: {rows[0].error}")
    assert [(row.grader, row.error) for row in rows] == [("replay", None)] * 2
    assert [(row.new_reward, row.new_correct) for row in rows] == [(0.0, False)] * 2
    assert [row.agrees for row in rows] == [True, False]
