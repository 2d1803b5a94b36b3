"""The env contract every rllm env shares: text spaces, TextEnv, task sources, the dataset
registry, registration (including the zero-import start-up hook) and missing-extra errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import rllm_envs
from gymnasium.spaces.utils import flatten, unflatten
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)
from rllm_envs import DatasetRegistry, InfrastructureFailure, TaskSources, TextEnv
from rllm_envs.core.extras import MissingExtraError, require_extra
from rllm_envs.core.spaces import UnicodeText
from rllm_envs.core.text_env import Transition

REPO = Path(__file__).resolve().parents[2]
UNUSUAL_TEXTS = ["", "plain", "émoji 🧊 中文", "tab\tnul\x00esc\x1b", "\U0010fffd"]


# -- UnicodeText ---------------------------------------------------------------------------------
def test_unicode_text_contains_any_scalar_value_within_the_bound():
    space = UnicodeText(12, min_length=0)
    for text in UNUSUAL_TEXTS:
        assert space.contains(text), text
    assert not space.contains("x" * 13)
    assert not space.contains("lone \ud800 surrogate")
    assert not space.contains(b"bytes") and not space.contains(None) and not space.contains(3)
    assert not UnicodeText(5, min_length=2).contains("a")


def test_unicode_text_samples_are_seeded_and_inside_the_space():
    space = UnicodeText(300, min_length=1, seed=7)
    samples = [space.sample() for _ in range(200)]
    assert all(space.contains(sample) for sample in samples)
    assert UnicodeText(300, min_length=1, seed=7).sample() == samples[0]
    assert any(ord(char) > 0x7F for sample in samples for char in sample)
    with pytest.raises(NotImplementedError):
        space.sample(mask=np.ones(3))


def test_unicode_text_round_trips_through_shared_memory_and_flattening():
    space = UnicodeText(32)
    memory = create_shared_memory(space, n=len(UNUSUAL_TEXTS))
    batch = read_from_shared_memory(space, memory, n=len(UNUSUAL_TEXTS))
    for index, text in enumerate(UNUSUAL_TEXTS):
        write_to_shared_memory(space, index, text, memory)
        assert unflatten(space, flatten(space, text)) == text
    # The batch is read when copied, as AsyncVectorEnv does after every reset and step.
    import copy

    assert copy.deepcopy(batch) == tuple(UNUSUAL_TEXTS)
    write_to_shared_memory(space, 0, "changed", memory)
    assert copy.deepcopy(batch)[0] == "changed"


# -- TextEnv -------------------------------------------------------------------------------------
class GuessEnv(TextEnv):
    """A small real TextEnv: guess the task's word; "crash" breaks its (pretend) grader."""

    def __init__(self, tasks=None, **kwargs):
        rows = tasks or [{"id": f"w{i}", "word": word} for i, word in enumerate("abcdefgh")]
        super().__init__(TaskSources().load(rows, required=["word"]), **kwargs)

    def begin(self, task):
        if task["word"] == "unbootable":
            raise InfrastructureFailure("sandbox", "the sandbox did not start")
        return f"Guess the word ({len(task['word'])} letters). " + task.get("padding", ""), {}

    def act(self, action):
        if action == "crash":
            raise InfrastructureFailure("grader", "the grader died")
        correct = action == self.task["word"]
        return Transition(
            "right" if correct else "wrong", float(correct), correct, info={"is_correct": correct}
        )


def test_seed_picks_the_task_and_options_task_overrides():
    env = GuessEnv()
    first = env.reset(seed=3)
    assert env.reset(seed=3) == first
    assert len({env.reset(seed=seed)[1]["task_id"] for seed in range(30)}) > 4
    _, info = env.reset(seed=3, options={"task": {"id": "mine", "word": "zebra"}})
    assert info["task_id"] == "mine"
    assert env.step("zebra")[1:3] == (1.0, True)
    with pytest.raises(TypeError, match="dict row"):
        env.reset(options={"task": "zebra"})


def test_rows_without_an_id_get_a_stable_derived_one():
    env = GuessEnv()
    ids = {env.reset(options={"task": {"word": "same"}})[1]["task_id"] for _ in range(3)}
    assert len(ids) == 1 and ids.pop().startswith("guess-")


def test_infrastructure_failure_ends_the_episode_with_its_kind():
    env = GuessEnv()
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("crash")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["failure"] == "grader" and "not your fault" in observation
    after = env.step("a")
    assert after[3] is True and after[4]["failure"] == "grader"

    observation, info = env.reset(options={"task": {"word": "unbootable"}})
    assert info["failure"] == "sandbox" and "sandbox did not start" in observation
    assert env.step("x")[3] is True


def test_steps_after_the_end_and_before_reset():
    env = GuessEnv()
    with pytest.raises(gym.error.ResetNeeded):
        env.step("a")
    env.reset(options={"task": {"word": "a"}})
    assert env.step("a")[2] is True
    observation, reward, terminated, truncated, info = env.step("a")
    assert (reward, terminated, truncated, info["action_valid"]) == (0.0, False, True, False)
    assert "reset()" in observation


def test_any_action_type_is_text_and_max_turns_truncates():
    env = GuessEnv(max_turns=4)
    env.reset(options={"task": {"word": "None"}})
    results = [env.step(action) for action in (b"\xff\xfe", 12, "\ud800")]
    assert all(env.observation_space.contains(result[0]) for result in results)
    assert not any(result[3] for result in results)
    assert env.step(None)[3] is True  # the fourth turn


def test_observations_are_clipped_to_the_space_and_infos_are_fresh():
    env = GuessEnv(max_observation_chars=100)
    observation, info = env.reset(options={"task": {"word": "a", "padding": "x" * 1000}})
    assert len(observation) == 100 and env.observation_space.contains(observation)
    assert observation.endswith("[... observation clipped to 100 characters]")
    info["task_id"] = "mutated"
    assert env.step("b")[4]["task_id"] != "mutated"


# -- task sources and the dataset registry ----------------------------------------------------
ROWS = [{"problem": "1+1", "solution": "2", "id": "p1"}, {"problem": "2+2", "solution": "4"}]


def test_task_files_of_every_kind_load_with_a_column_map(tmp_path):
    (tmp_path / "tasks.jsonl").write_text("\n".join(json.dumps(row) for row in ROWS) + "\n\n")
    (tmp_path / "tasks.json").write_text(json.dumps(ROWS))
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(ROWS), tmp_path / "tasks.parquet")
    column_map = {"problem": "question", "solution": "answer"}
    for name in ("tasks.jsonl", "tasks.json", "tasks.parquet"):
        task_set = TaskSources().load(
            str(tmp_path / name), column_map=column_map, required=["question", "answer"]
        )
        assert [row["question"] for row in task_set.rows] == ["1+1", "2+2"]
        assert task_set[0]["answer"] == "2" and len(task_set) == 2


def test_task_sources_give_clear_errors(tmp_path):
    sources = TaskSources(shipped={"train": tmp_path / "train.jsonl"})
    with pytest.raises(ValueError, match=r"missing column\(s\) \['question'\].*column_map"):
        sources.load(ROWS, required=["question"])
    with pytest.raises(ValueError, match="unknown task file type"):
        sources.load(str(tmp_path / "tasks.csv"))
    with pytest.raises(FileNotFoundError, match="not found"):
        sources.load(str(tmp_path / "absent.jsonl"))
    (tmp_path / "broken.jsonl").write_text('{"a": 1}\n{not json\n')
    with pytest.raises(ValueError, match="broken.jsonl:2: not JSON"):
        sources.load(str(tmp_path / "broken.jsonl"))
    with pytest.raises(ValueError, match="no shipped task set 'test'"):
        sources.load("shipped:test")
    with pytest.raises(ValueError, match="empty"):
        sources.load([])


def test_dataset_registry_round_trip():
    DatasetRegistry.register_dataset("arith", ROWS, split="train")
    DatasetRegistry.register_dataset("arith", ROWS[:1], split="test")
    assert "arith" in DatasetRegistry.get_dataset_names()
    assert DatasetRegistry.get_dataset_splits("arith") == ["test", "train"]
    assert DatasetRegistry.load_dataset("arith", "train").rows == tuple(ROWS)
    assert TaskSources().load("registry:arith", split="test").rows == (ROWS[0],)
    with pytest.raises(KeyError, match="splits"):
        DatasetRegistry.load_dataset("arith", "validation")
    with pytest.raises(ValueError, match="letters, digits"):
        DatasetRegistry.register_dataset("../escape", ROWS)
    DatasetRegistry.remove_dataset("arith")
    assert not DatasetRegistry.dataset_exists("arith")


# -- registration and extras ---------------------------------------------------------------------
def python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_every_id_is_registered_and_module_qualified_make_works():
    from gymnasium.envs.registration import registry

    assert set(rllm_envs.ENV_IDS) <= set(registry)
    env = gym.make("rllm_envs:rllm/FrozenLake-v0")
    assert env.reset(seed=0)[0].startswith("FrozenLake")


def test_startup_hook_file_is_installed_in_site_packages():
    assert (Path(sysconfig.get_paths()["purelib"]) / "rllm_envs_autoregister.pth").is_file()


def test_plain_gymnasium_program_makes_rllm_ids_without_importing_rllm_envs():
    code = (
        "import sys, gymnasium as gym\n"
        "env = gym.make('rllm/FrozenLake-v0')\n"
        "print(env.reset(seed=0)[0].splitlines()[0])\n"
    )
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("FrozenLake:")
    disabled = python(code, RLLM_ENVS_NO_AUTOREGISTER="1")
    assert disabled.returncode != 0 and "rllm" in disabled.stderr  # the hook is what did it


def test_startup_hook_imports_nothing_in_programs_without_gymnasium():
    result = python(
        "import sys; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('rllm_envs', 'gymnasium', 'rllm_envs_autoregister')))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['rllm_envs_autoregister']"


def test_importing_rllm_envs_imports_no_environment_module():
    result = python(
        "import sys, rllm_envs\n"
        "print(sorted(m for m in sys.modules if m.startswith('rllm_envs.') "
        "and not m.startswith('rllm_envs.core')))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_missing_extra_names_the_pip_command():
    with pytest.raises(MissingExtraError, match=r"pip install 'rllm-envs\[web\]'"):
        require_extra("web", "json", "no_such_module_for_rllm_tests")
    require_extra("math", "json")  # present: no error


@pytest.mark.slow
def test_clean_install_of_rllm_envs_is_light_and_the_one_liner_works(tmp_path):
    import shutil

    source = tmp_path / "rllm-envs"
    shutil.copytree(
        REPO / "packages" / "rllm-envs",
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    installed = subprocess.run([*pip, str(source)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    listing = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    )
    packages = {entry["name"].lower() for entry in json.loads(listing.stdout)}
    assert {"rllm-envs", "gymnasium", "numpy"} <= packages
    assert not packages & {"torch", "transformers"}
    one_liner = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import gymnasium as gym; env = gym.make('rllm/FrozenLake-v0'); "
            "print(env.reset(seed=0)[0].splitlines()[0])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert one_liner.returncode == 0, one_liner.stderr
    assert one_liner.stdout.startswith("FrozenLake:")
