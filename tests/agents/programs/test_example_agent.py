"""The ``openai``-SDK example agent (examples/gateway) as an agent program, unchanged: its tool
loop against a model that calls the calculator, and ``rllm-eval`` on the tiny model with the
agent as a function and as a command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.cli.eval import main
from rllm_agents.engines.base import ModelOutput
from rllm_agents.programs import ProgramExecutionEngine
from rllm_agents.types import Episode, TerminationReason

EXAMPLES = Path(__file__).parents[3] / "examples" / "gateway"
AGENT = f"{EXAMPLES / 'math_agent.py'}:run"
AGENT_COMMAND = f"{sys.executable} {EXAMPLES / 'math_agent_cli.py'}"
PROBLEM = {"id": "mul-17-23", "question": "What is 17 * 23?", "answer": "391"}
TOOL_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>'


class CalculatorUser:
    """A token-level engine on a real tokenizer that calls the calculator first, then answers
    with what the tool said: the turns an agent with tools must handle."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.prompts: list[str] = []

    async def generate(self, messages=None, *, prompt_ids=None, sampling=None, tools=None):
        prompt = self.tokenizer.decode(prompt_ids)
        self.prompts.append(prompt)
        text = "The product is \\boxed{391}." if "391" in prompt else TOOL_CALL
        completion = self.tokenizer.encode(text, add_special_tokens=False)
        completion.append(self.tokenizer.eos_token_id)
        return ModelOutput(
            text=text,
            prompt_ids=list(prompt_ids),
            completion_ids=completion,
            logprobs=[-0.5] * len(completion),
        )

    async def aclose(self) -> None:
        pass


def math_env():
    return gym.make("rllm/Math-v0")


async def test_the_agent_follows_tool_calls_to_a_graded_answer(smollm2_tokenizer):
    engine = CalculatorUser(smollm2_tokenizer)
    runner = ProgramExecutionEngine(
        AGENT, engine, env_factory=math_env, tokenizer=smollm2_tokenizer, retry_limit=0
    )
    [episode] = await runner.execute_tasks([PROBLEM], [0])
    assert episode.termination_reason == TerminationReason.ENV_DONE, episode.error
    assert episode.reward == 1.0 and episode.is_correct is True
    assert episode.info["answer"] == "The product is \\boxed{391}."
    # Two calls: the tool call, then the answer after the calculator's result came back.
    assert episode.metrics["turns"] == 2.0
    assert "391" not in engine.prompts[0] and "391" in engine.prompts[1]
    generated = [
        token
        for trajectory in episode.trajectories
        for token, mask in zip(trajectory.response_ids, trajectory.response_mask, strict=True)
        if mask
    ]
    completions = [step.response_ids for t in episode.trajectories for step in t.steps]
    assert sorted(generated) == sorted(token for c in completions for token in c)
    assert all(t.reward == 1.0 for t in episode.trajectories)
    assert episode.info["sequences"]["calls"] == 2
    assert episode.info["sequences"]["failed_calls"] == 0


def read_run(output: Path) -> tuple[list[Episode], dict]:
    lines = (output / "episodes.jsonl").read_text().splitlines()
    return [Episode.from_json(line) for line in lines], json.loads(
        (output / "summary.json").read_text()
    )


def eval_argv(output: Path, *program: str) -> list[str]:
    argv = ["--env", "rllm/Math-v0", "--split", "gsm8k_test", "--num-tasks", "2"]
    argv += ["--model", "tiny", "--max-tokens", "6", "--parallel", "4", "--timeout", "120"]
    return [*argv, "--output", str(output), "--no-progress", *program]


def assert_recorded(episodes: list[Episode], samples: int) -> None:
    assert len(episodes) == 2 * samples
    for episode in episodes:
        assert episode.termination_reason == TerminationReason.ENV_DONE, episode.error
        assert episode.info["grade"]["grade"] in ("wrong", "no_boxed_answer")
        [trajectory] = episode.trajectories  # one call: one sequence
        assert trajectory.prompt_ids and 1 <= sum(trajectory.response_mask) <= 7
        assert len(trajectory.response_logprobs) == len(trajectory.response_ids)
        assert episode.metrics["completion_tokens"] == len(trajectory.response_ids)


@pytest.mark.slow
def test_rllm_eval_runs_the_agent_as_a_function(tmp_path):
    output = tmp_path / "run"
    assert main([*eval_argv(output, "--agent-program", AGENT), "--n", "2"]) == 0
    episodes, summary = read_run(output)
    assert_recorded(episodes, samples=2)
    assert summary["episodes"] == 4 and summary["tasks"] == 2 and "pass@2" in summary
    assert summary["mean_reward"] == 0.0  # a random model never boxes the right number
    assert summary["config"]["agent_program"] == AGENT


@pytest.mark.slow
def test_rllm_eval_runs_the_agent_as_a_command(tmp_path):
    output = tmp_path / "run"
    assert main(eval_argv(output, "--agent-cmd", AGENT_COMMAND)) == 0
    episodes, summary = read_run(output)
    assert_recorded(episodes, samples=1)
    assert summary["errors"] == 0 and summary["infra_failures"] == 0
    assert summary["program_failures"] == {}


def test_rllm_eval_serves_programs_from_gateway_processes(tmp_path):
    """Against a model server, the program's calls can be served by several processes."""
    from rllm_agents.testing.fault_server import FaultServer

    output = tmp_path / "run"
    argv = ["--env", "rllm/Math-v0", "--split", "gsm8k_test", "--num-tasks", "4"]
    argv += ["--model", "canned", "--output", str(output), "--no-progress"]
    with FaultServer(completion="So the answer is \\boxed{7}.") as server:
        argv += ["--base-url", server.base_url, "--agent-program", AGENT]
        assert main([*argv, "--gateway-processes", "2"]) == 0
    episodes, summary = read_run(output)
    assert len(episodes) == 4 and summary["errors"] == 0
    for episode in episodes:
        assert episode.termination_reason == TerminationReason.ENV_DONE, episode.error
        assert episode.info["answer"] == "So the answer is \\boxed{7}."
        assert episode.info["sequences"]["calls"] == 1  # recorded in a serving process
