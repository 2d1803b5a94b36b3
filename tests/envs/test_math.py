"""rllm/Math-v0: answer extraction, grading (with its deadline), episodes and task sources."""

from __future__ import annotations

import json
import os
import time
import warnings

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401
from gymnasium.utils.env_checker import check_env
from rllm_envs.core.tasks import read_task_file
from rllm_envs.math import GraderFailure, MathEnv, grade_answer
from rllm_envs.math.extract import extract_final_answer, plain_number
from rllm_envs.math.sets import SHIPPED_SETS
from rllm_envs.math.verifier import Verifier

# A tower of powers that sympy tries to evaluate for ever.
HANGING_ANSWER = r"\boxed{9^{9^{9^{9}}}}"


@pytest.fixture(scope="module")
def verifier():
    with Verifier(timeout_s=10) as shared:
        yield shared


def make(**kwargs) -> gym.Env:
    return gym.make("rllm/Math-v0", **kwargs)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child that was reaped is gone; a zombie would still answer kill(0).
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


# -- extraction --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("response", "answer", "reason"),
    [
        (r"so $x = \boxed{\frac{\sqrt{3}}{2}}$.", r"\frac{\sqrt{3}}{2}", "boxed"),
        (r"first \boxed{3}, on reflection \boxed{4}", "4", "boxed"),
        (r"\fbox{7}", "7", "boxed"),
        (r"The answer is \boxed 5.", "5", "boxed"),
        (r"\boxed{ \{1, 2\} }", r"\{1, 2\}", "boxed"),
        (r"<think>it is \boxed{3}</think>Final: \boxed{4}", "4", "boxed"),
        (r"<think>it is \boxed{3} so far", None, "unfinished_thinking"),
        (r"<think>\boxed{3}</think>so it is three", None, "no_boxed_answer"),
        (r"\boxed{12", None, "no_boxed_answer"),
        (r"\boxed{}", None, "empty_boxed"),
        (r"\boxedanswer{4}", None, "no_boxed_answer"),
        ("The answer is 42.", None, "no_boxed_answer"),
    ],
)
def test_final_answer_is_the_last_box_after_thinking(response, answer, reason):
    extraction = extract_final_answer(response)
    assert (extraction.answer, extraction.reason) == (answer, reason)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1,234", 1234),
        ("1{,}234", 1234),
        (r"60,\!000", 60000),
        (r"\$18", 18),
        ("$18.00", 18),
        ("18 dollars", 18),
        (r"12\text{ cm}", 12),
        (r"25\%", 25),
        ("-3.5", -3.5),
        ("5x", None),
        ("2 pi", None),
        ("3, 5, 7", None),
        (r"\frac{1}{2}", None),
    ],
)
def test_plain_numbers_ignore_separators_currency_and_units(text, value):
    assert plain_number(text) == value


# -- grading -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("response", "gold", "correct"),
    [
        # GSM8K-style numbers
        (r"She pays \boxed{1,234} in total.", "1234", True),
        (r"\boxed{\$70,000}", "70000", True),
        (r"\boxed{18 dollars}", "18", True),
        (r"\boxed{18.0}", "18", True),
        (r"\boxed{17}", "18", False),
        (r"\boxed{180}", "18", False),
        # LaTeX answers
        (r"\boxed{\dfrac{14}{3}}", r"\frac{14}{3}", True),
        (r"\boxed{14/3}", r"\frac{14}{3}", True),
        (r"\boxed{\frac{14}{5}}", r"\frac{14}{3}", False),
        (r"\boxed{0.5}", r"\frac12", True),
        (r"\boxed{\sqrt{117}}", r"3\sqrt{13}", True),
        (r"\boxed{3\sqrt{12}}", r"3\sqrt{13}", False),
        (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"(3,\frac{\pi}{2})", True),
        (r"\boxed{-2, 1}", "1,-2", True),
        (r"\boxed{[0,3)}", "[0,3)", True),
        (r"\boxed{[0,3]}", "[0,3)", False),
        (r"\boxed{\text{Evelyn}}", r"\text{Evelyn}", True),
        (r"\boxed{90^\circ}", r"90^\circ", True),
        (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt3}{2}", True),
        # the last box after thinking counts
        (r"<think>maybe \boxed{3}</think> so \boxed{4}", "4", True),
        (r"<think>maybe \boxed{4}</think> so \boxed{3}", "4", False),
        # garbage in a box is just wrong
        (r"\boxed{)(*&^%$#@!}", "4", False),
        (r"\boxed{\frac{}{}}", r"\frac{1}{2}", False),
        (r"\boxed{\begin{pmatrix}}", "4", False),
        (r"\boxed{\left(}", "4", False),
    ],
)
def test_grading_real_answers(verifier, response, gold, correct):
    result = grade_answer(response, gold, verifier=verifier)
    assert result.format_ok
    assert result.is_correct is correct
    assert result.reason == ("correct" if correct else "wrong")


@pytest.mark.parametrize("response", ["42", "", "\x00\x1b[2J", "<think>\\boxed{4}", "\\boxed{}"])
def test_a_reply_without_a_boxed_answer_is_a_format_error(response):
    result = grade_answer(response, "42")
    assert (result.is_correct, result.format_ok, result.extracted_answer) == (False, False, None)


def test_an_absurdly_long_answer_is_wrong_without_parsing():
    result = grade_answer("\\boxed{" + "1+" * 50_000 + "1}", "3")
    assert (result.is_correct, result.reason) == (False, "answer_too_long")


@pytest.mark.slow
def test_a_hanging_answer_fails_the_grader_within_its_deadline_and_the_next_one_works():
    with Verifier(timeout_s=1.0) as verifier:
        assert grade_answer(r"\boxed{\frac{1}{2}}", "0.5", verifier=verifier).is_correct
        hung_worker = verifier.worker_pid
        started = time.monotonic()
        with pytest.raises(GraderFailure) as failure:
            grade_answer(HANGING_ANSWER, "5", verifier=verifier)
        assert time.monotonic() - started < 3
        assert failure.value.kind == "grader"
        assert not alive(hung_worker)  # killed, not left spinning
        assert grade_answer(r"\boxed{\frac{2}{4}}", "0.5", verifier=verifier).is_correct
        assert verifier.worker_pid not in (None, hung_worker)


@pytest.mark.slow
def test_a_crashed_worker_is_replaced(verifier):
    assert verifier.verify("2", "2")
    os.kill(verifier.worker_pid, 9)
    time.sleep(0.1)
    assert verifier.verify(r"\frac{1}{2}", "0.5")


def test_grading_is_safe_from_threads(verifier):
    from concurrent.futures import ThreadPoolExecutor

    cases = [(rf"\boxed{{\frac{{{n}}}{{2}}}}", str(n / 2)) for n in range(1, 13)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: grade_answer(*c, verifier=verifier), cases))
    assert all(result.is_correct for result in results)


# -- episodes --------------------------------------------------------------------------------------
def test_registered_id_passes_check_env_without_warnings():
    env = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=False)
    env.close()


def test_seed_picks_the_task_and_the_observation_asks_for_a_boxed_answer():
    env = make()
    first, info = env.reset(seed=7)
    again, info_again = env.reset(seed=7)
    assert (first, info) == (again, info_again)
    assert first.startswith(env.unwrapped.task["question"])
    assert "\\boxed{}" in first
    assert info["task_id"].startswith("gsm8k/train/") and info["source"] == "gsm8k"
    seen = {env.reset(seed=seed)[1]["task_id"] for seed in range(10)}
    assert len(seen) > 5
    env.close()


def test_correct_answer_earns_one_and_ends_the_episode():
    env = make(tasks="shipped:gsm8k_test")
    env.reset(seed=0)
    gold = env.unwrapped.task["answer"]
    observation, reward, terminated, truncated, info = env.step(f"So in total \\boxed{{{gold}}}.")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["is_correct"] and info["action_valid"] and info["extracted_answer"] == gold
    assert observation.startswith("Correct")
    env.close()


def test_options_task_runs_an_explicit_row_and_a_wrong_answer_scores_zero():
    env = make()
    row = {"id": "mine-1", "question": "What is 6 times 7?", "answer": "42"}
    observation, info = env.reset(options={"task": row})
    assert observation.startswith("What is 6 times 7?") and info["task_id"] == "mine-1"
    _, reward, terminated, truncated, info = env.step(r"\boxed{41}")
    assert (reward, terminated, truncated, info["is_correct"]) == (0.0, True, False, False)
    env.close()


def test_format_penalty_applies_to_a_reply_without_a_boxed_answer():
    env = make(format_penalty=0.25)
    env.reset(seed=1)
    observation, reward, terminated, truncated, info = env.step("I think it is 12")
    assert (reward, terminated, truncated) == (-0.25, True, False)
    assert info["action_valid"] is False and info["grade"] == "no_boxed_answer"
    assert "\\boxed{}" in observation


@pytest.mark.slow
def test_multi_turn_asks_for_a_review_after_a_wrong_answer_then_accepts_a_fix():
    env = make(max_turns=3, instruction="Box it.")
    row = {"question": "Compute $\\frac{1}{2}+\\frac{1}{3}$.", "answer": "\\frac{5}{6}"}
    observation, _ = env.reset(options={"task": row})
    assert observation.endswith("\n\nBox it.")
    observation, reward, terminated, truncated, info = env.step(r"\boxed{\frac{2}{5}}")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert "Review your solution" in observation and "\\frac{2}{5}" in observation
    _, reward, terminated, truncated, info = env.step(r"<think>redo</think>\boxed{5/6}")
    assert (reward, terminated, truncated, info["turn"]) == (1.0, True, False, 2)
    env.close()


def test_multi_turn_is_truncated_when_the_tries_run_out():
    env = make(max_turns=2)
    env.reset(options={"task": {"question": "1+1?", "answer": "2"}})
    assert env.step(r"\boxed{3}")[2:4] == (False, False)
    observation, reward, terminated, truncated, _ = env.step(r"\boxed{4}")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "ended" in observation


@pytest.mark.slow
def test_a_grader_that_hangs_ends_the_episode_as_an_infrastructure_failure():
    env = MathEnv(grading_timeout_s=1.0)
    env.reset(options={"task": {"question": "Pick a number.", "answer": "5"}})
    env.step(r"\boxed{4}")  # starts the worker (not counted against the deadline)
    env.reset(options={"task": {"question": "Pick a number.", "answer": "5"}})
    _, reward, terminated, truncated, info = env.step(HANGING_ANSWER)
    assert (reward, terminated, truncated, info["failure"]) == (0.0, False, True, "grader")
    env.close()


@pytest.mark.slow
def test_close_stops_the_grading_worker_and_is_idempotent():
    env = MathEnv()
    env.reset(options={"task": {"question": "?", "answer": "\\frac{1}{2}"}})
    env.step(r"\boxed{0.5}")
    pid = env.verifier.worker_pid
    assert pid is not None and alive(pid)
    env.close()
    env.close()
    assert not alive(pid)


@pytest.mark.slow
def test_latex_answers_are_graded_inside_async_vector_env_workers():
    # Async workers are daemonic processes, which may not fork multiprocessing children:
    # the grading worker must start there all the same.
    envs = gym.make_vec("rllm/Math-v0", num_envs=2, vectorization_mode="async")
    try:
        row = {"question": "Simplify $\\sqrt{117}$.", "answer": "3\\sqrt{13}"}
        envs.reset(seed=0, options={"task": row})
        _, rewards, terminated, _, infos = envs.step([r"\boxed{\sqrt{117}}", r"\boxed{3\sqrt{12}}"])
        assert rewards.tolist() == [1.0, 0.0] and terminated.all()
        assert "failure" not in infos
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_turns": 0}, "max_turns"),
        ({"format_penalty": -1}, "format_penalty"),
        ({"tasks": "shipped:nope"}, "no shipped task set"),
        ({"tasks": [{"prompt": "x", "answer": "1"}]}, "missing column"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MathEnv(**kwargs)


def test_an_options_row_without_an_answer_is_a_clear_error():
    env = MathEnv()
    with pytest.raises(ValueError, match="missing"):
        env.reset(options={"task": {"question": "no gold"}})


# -- task sets -------------------------------------------------------------------------------------
def test_shipped_sets_have_their_sizes_fields_and_unique_ids():
    sizes = {"gsm8k_train": 500, "gsm8k_test": 300, "math_train": 500, "math_test": 500}
    ids: set[str] = set()
    for name, size in sizes.items():
        rows = read_task_file(SHIPPED_SETS[name])
        assert len(rows) == size, name
        for row in rows:
            assert row["question"].strip() and str(row["answer"]).strip()
            assert row["source"] in {"gsm8k", "math"}
        ids |= {row["id"] for row in rows}
    assert len(ids) == sum(sizes.values())
    for family in ("gsm8k", "math"):
        train, test = (
            {row["question"] for row in read_task_file(SHIPPED_SETS[f"{family}_{split}"])}
            for split in ("train", "test")
        )
        assert not train & test, f"{family}: a test problem is also in the train set"
    total_bytes = sum(path.stat().st_size for path in SHIPPED_SETS.values())
    assert total_bytes < 3_000_000


def test_shipped_gold_answers_grade_as_correct(verifier):
    for name in ("gsm8k_train", "gsm8k_test"):
        for row in read_task_file(SHIPPED_SETS[name]):
            assert plain_number(row["answer"]) is not None, row["id"]
            assert grade_answer(f"\\boxed{{{row['answer']}}}", row["answer"]).is_correct
    for name in ("math_train", "math_test"):
        for row in read_task_file(SHIPPED_SETS[name])[::10]:
            response = f"The answer is $\\boxed{{{row['answer']}}}$."
            assert grade_answer(response, row["answer"], verifier=verifier).is_correct, row["id"]


def test_all_shipped_sets_load_by_name():
    for name in SHIPPED_SETS:
        env = MathEnv(dataset=f"shipped:{name}")
        _, info = env.reset(seed=0)
        assert info["task_id"].startswith(("gsm8k/", "math/"))
        env.close()


USER_ROWS = [
    {"problem": "What is 2+3?", "solution": "5", "uid": "u1"},
    {"problem": "What is $\\frac{1}{2} \\cdot 4$?", "solution": "2", "uid": "u2"},
]
COLUMNS = {"problem": "question", "solution": "answer"}


def _solve_each(env: gym.Env, count: int) -> list[str]:
    solved = []
    for index in range(count):
        env.reset(seed=index)
        task = env.unwrapped.task
        assert env.step(f"\\boxed{{{task['answer']}}}")[1] == 1.0
        solved.append(task["uid"])
    return solved


def test_jsonl_file_with_a_column_map(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in USER_ROWS))
    env = make(tasks=str(path), column_map=COLUMNS)
    assert set(_solve_each(env, 8)) == {"u1", "u2"}
    observation, info = env.reset(seed=0)
    assert info["task_id"] in {"u1", "u2"} and "What is" in observation


def test_parquet_file_with_a_column_map(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "mine.parquet"
    pq.write_table(pa.Table.from_pylist(USER_ROWS), path)
    env = make(dataset=str(path), column_map=COLUMNS)
    assert set(_solve_each(env, 8)) == {"u1", "u2"}


def test_a_file_without_the_needed_columns_names_them(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(USER_ROWS[0]) + "\n")
    with pytest.raises(ValueError, match="column_map"):
        make(tasks=str(path))


def test_local_hugging_face_datasets_with_a_column_map(tmp_path):
    import datasets

    saved = tmp_path / "saved"
    datasets.Dataset.from_list(USER_ROWS).save_to_disk(str(saved))
    env = make(tasks=f"hf:{saved}", column_map=COLUMNS)
    assert set(_solve_each(env, 8)) == {"u1", "u2"}

    saved_dict = tmp_path / "saved_dict"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(USER_ROWS)}).save_to_disk(
        str(saved_dict)
    )
    env = make(tasks=f"hf:{saved_dict}", split="test", column_map=COLUMNS)
    assert set(_solve_each(env, 8)) == {"u1", "u2"}

    files = tmp_path / "files"
    files.mkdir()
    (files / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in USER_ROWS))
    env = make(tasks=f"hf:{files}", column_map=COLUMNS)
    assert set(_solve_each(env, 8)) == {"u1", "u2"}
