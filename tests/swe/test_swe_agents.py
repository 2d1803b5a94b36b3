"""SWEAgent and SWEBashAgent on rllm/SWE-v0 under the AgentExecutionEngine: scripted models
that write the gold fix (as structured tool calls, ``<tool_call>`` text, or bash blocks) resolve
the task; the real tiny model runs token-level episodes that the env grades at its turn limit."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.agents import SWEAgent, SWEBashAgent, agent_for_env
from rllm_agents.engines.base import ModelOutput, SamplingParams
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.types import TerminationReason

from tests.envs.swe_support import FAST_POLICY, require_images, shipped_rows

pytestmark = pytest.mark.slow


class GoldFixingEngine:
    """A rollout engine that plays the gold patch of whichever task the prompt states: write
    it to a file, apply it, submit. `style` is how the calls are written."""

    def __init__(self, rows: list[dict[str, Any]], style: str) -> None:
        self.patches = {row["problem_statement"].strip(): row["patch"] for row in rows}
        self.style = style
        self.seen_tools: list[Any] = []

    def _calls(self, patch: str) -> list[tuple[str, dict[str, Any]]]:
        return [
            ("create", {"path": "/tmp/fix.patch", "content": patch}),
            ("bash", {"command": "git apply /tmp/fix.patch && git diff --stat"}),
            ("submit", {}),
        ]

    async def generate(self, messages=None, *, prompt_ids=None, sampling=None, tools=None):
        self.seen_tools.append(tools)
        statement = next(m["content"] for m in messages if m["role"] == "user")
        patch = next(p for text, p in self.patches.items() if text in statement)
        turn = sum(message["role"] == "assistant" for message in messages)
        name, arguments = self._calls(patch)[turn]
        if self.style == "structured":
            call = {
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            return ModelOutput(text="", finish_reason="tool_calls", tool_calls=[call])
        if self.style == "text":
            return ModelOutput(
                text=f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
            )
        commands = {
            "create": f"cat > /tmp/fix.patch <<'RLLM_EOF'\n{patch}RLLM_EOF",
            "bash": arguments.get("command", ""),
            "submit": "submit",
        }
        return ModelOutput(text=f"Next step.\n```bash\n{commands[name]}\n```")

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def rows():
    toolz = [row for row in shipped_rows("train") if row["repo"] == "toolz"][:2]
    require_images({row["image_name"] for row in toolz})
    return toolz


def run_episodes(agent_factory, engine, rows, **kwargs):
    runner = AgentExecutionEngine(
        agent_factory,
        lambda: gym.make("rllm/SWE-v0", tasks=rows, policy=FAST_POLICY, max_turns=6),
        engine,
        n_parallel=2,
        max_turns=6,
        sampling=SamplingParams(max_tokens=64),
        progress=False,
        **kwargs,
    )
    return runner.run(tasks=rows)


@pytest.mark.parametrize("style", ["structured", "text"])
def test_swe_agent_fixes_the_bug_with_tool_calls(rows, style):
    engine = GoldFixingEngine(rows, style)
    episodes = run_episodes(SWEAgent, engine, rows)
    assert [episode.task["instance_id"] for episode in episodes] == [r["instance_id"] for r in rows]
    for episode in episodes:
        assert episode.termination_reason == TerminationReason.ENV_DONE
        trajectory = episode.trajectories[0]
        assert trajectory.reward == 1.0 and len(trajectory.steps) == 3
        last = trajectory.steps[-1]
        assert last.info["is_correct"] and last.info["ended_by"] == "submit"
        roles = [message["role"] for message in last.chat_completions]
        assert roles[:2] == ["system", "user"] and "tool" in roles
    # The env's tool schemas reached the model through the agent (native tool calling).
    names = {tool["function"]["name"] for tool in engine.seen_tools[0]}
    assert names == {"bash", "view", "str_replace", "create", "search", "submit"}


def test_bash_only_agent_fixes_the_bug_with_one_command_per_reply(rows):
    engine = GoldFixingEngine(rows, "bash")
    episodes = run_episodes(SWEBashAgent, engine, rows)
    for episode in episodes:
        trajectory = episode.trajectories[0]
        assert trajectory.steps, (episode.termination_reason, episode.error)
        assert trajectory.reward == 1.0, trajectory.steps[-1].info.get("reason")
        first_prompt = trajectory.steps[0].chat_completions
        assert "```bash" in first_prompt[0]["content"]
        assert "JSON schemas" not in first_prompt[1]["content"]
    assert engine.seen_tools == [None] * len(engine.seen_tools)


def test_the_registry_gives_the_swe_agent():
    assert agent_for_env("rllm/SWE-v0") is SWEAgent


def test_real_model_episodes_are_graded_at_the_env_turn_limit(rows, tiny_engine):
    runner = AgentExecutionEngine(
        SWEAgent,
        lambda: gym.make("rllm/SWE-v0", tasks=rows[:1], policy=FAST_POLICY, max_turns=2),
        tiny_engine,
        tokenizer=tiny_engine.tokenizer,
        n_parallel=1,
        max_turns=2,
        sampling=SamplingParams(temperature=1.0, max_tokens=16),
        progress=False,
    )
    (episode,) = runner.run(tasks=rows[:1])
    assert episode.termination_reason in {
        TerminationReason.ENV_TRUNCATED,
        TerminationReason.ENV_DONE,
    }
    trajectory = episode.trajectories[0]
    assert trajectory.reward == 0.0 and trajectory.steps[-1].info["is_correct"] is False
    assert trajectory.info["prefix_consistent"]
    assert len(trajectory.response_ids) == len(trajectory.response_mask) > 0


def test_rllm_eval_reports_pass_at_k_on_swe(tmp_path):
    # An OpenAI-compatible server whose "model" writes the gold fix as <tool_call> text.
    from rllm_agents.cli.eval import main
    from rllm_agents.testing.fault_server import FaultServer

    first_rows = shipped_rows("train")[:2]  # what --num-tasks 2 takes
    require_images({row["image_name"] for row in first_rows})
    scripted = GoldFixingEngine(first_rows, "text")

    def completion(body: dict[str, Any]) -> str:
        messages = body["messages"]
        statement = next(m["content"] for m in messages if m["role"] == "user")
        patch = next(p for text, p in scripted.patches.items() if text in statement)
        turn = sum(message["role"] == "assistant" for message in messages)
        name, arguments = scripted._calls(patch)[turn]
        return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"

    output = tmp_path / "run"
    kwargs = json.dumps({"max_turns": 6, "policy": FAST_POLICY})
    with FaultServer(completion=completion) as server:
        argv = ["--env", "rllm/SWE-v0", "--base-url", server.base_url, "--model", "canned"]
        argv += ["--n", "2", "--num-tasks", "2", "--split", "train", "--max-turns", "6"]
        argv += ["--env-kwargs", kwargs, "--parallel", "4", "--output", str(output)]
        argv += ["--no-progress"]
        assert main(argv) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["tasks"] == 2
    assert summary["pass@1"] == 1.0 and summary["pass@2"] == 1.0
    assert summary["mean_reward"] == 1.0


class LongOutputEngine:
    """A model stand-in that lists a long file every turn: each tool output is thousands of
    tokens, so the conversation passes a small context budget within two turns."""

    async def generate(self, messages=None, *, prompt_ids=None, sampling=None, tools=None):
        command = {"name": "bash", "arguments": {"command": "seq 1 2000"}}
        return ModelOutput(text=f"<tool_call>{json.dumps(command)}</tool_call>")

    async def aclose(self) -> None:
        return None


def test_dropping_old_tool_outputs_keeps_a_long_swe_episode_in_budget(rows):
    from rllm_agents.execution.compaction import CompactionSettings
    from rllm_agents.models import load_tokenizer

    budget = 6000
    compaction = CompactionSettings(policy="drop_tool_outputs", keep_turns=1, keep_chars=200)
    tokenizer = load_tokenizer("tiny")
    (episode,) = run_episodes(
        SWEAgent, LongOutputEngine(), rows[:1], tokenizer=tokenizer,
        max_context_tokens=budget, compaction=compaction,
    )  # fmt: skip
    # Six turns of ~9,000-token outputs (each past the budget alone) played within a
    # 6,000-token budget: what the model saw of them was cut to their start and end.
    assert episode.termination_reason == TerminationReason.ENV_TRUNCATED, episode.error
    trajectory = episode.trajectories[0]
    assert len(trajectory.steps) == 6
    assert all(len(step.prompt_ids) <= budget for step in trajectory.steps)
    assert sum(len(str(step.observation)) for step in trajectory.steps) > 6 * budget
    last_prompt = tokenizer.decode(trajectory.sequences[-1].prompt_ids)
    assert "characters removed" in last_prompt and "exit code: 0" in last_prompt
    records = trajectory.info["compactions"]
    assert records and {r["policy"] for r in records} == {"drop_tool_outputs"}
    # A cut made before the model saw the output continues its sequence (the model never saw
    # the whole output); a cut of what it saw starts a new one.
    assert 2 <= len(trajectory.sequences) <= len(records) + 1
