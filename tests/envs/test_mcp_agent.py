"""ToolAgent with rllm/MCP-v0: tool schemas into a real transformers chat template (or the
system-prompt fallback), replies to actions, tool results back as tool messages."""

from __future__ import annotations

import json

import pytest

from tests.parts import require_module

require_module("mcp", "rllm/MCP-v0 needs the mcp extra")
require_module("transformers", "chat templates need transformers")

from rllm_agents.agents.tool_agent import (  # noqa: E402
    ToolAgent,
    template_supports_tools,
    tool_call_text,
)
from rllm_envs.mcp import MCPEnv  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from tokenizers.models import WordLevel  # noqa: E402
from tokenizers.pre_tokenizers import Whitespace  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from tests.agents.test_agents import play  # noqa: E402

# A chat template in the style of tool-calling models: tools listed in the system turn,
# a "tool" role for results.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{{ messages[0]['content'] }}\n# Tools\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|im_end|>\n"
    "{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}"
    "{% for message in rest %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# A plain chat template that ignores tools (SmolLM2-style).
PLAIN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tokenizer_with(template: str) -> PreTrainedTokenizerFast:
    backend = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    tokenizer.chat_template = template
    return tokenizer


def test_template_tool_support_is_detected():
    assert template_supports_tools(tokenizer_with(TOOL_TEMPLATE))
    assert not template_supports_tools(tokenizer_with(PLAIN_TEMPLATE))


def test_structured_tool_calls_become_env_actions():
    calls = [
        {"type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}},
        {"function": {"name": "open_document", "arguments": {"doc_id": "town-01"}}},
    ]
    assert tool_call_text(calls) == (
        '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>\n'
        '<tool_call>{"name": "open_document", "arguments": {"doc_id": "town-01"}}</tool_call>'
    )


def test_unreadable_structured_calls_reach_the_env_which_explains_them(retrieval_env):
    retrieval_env.reset(seed=0)
    action = tool_call_text([{"function": {"name": "search", "arguments": "{query: x"}}])
    observation, _, terminated, _, info = retrieval_env.step(action)
    assert "arguments string is not valid JSON" in observation
    assert info["action_valid"] is False and not terminated


@pytest.fixture(scope="module")
def retrieval_env():
    env = MCPEnv(tasks=[{"question": "Where was Sekrous Pirkdrifur born?", "answer": "Kreaxreas"}])
    yield env
    env.close()


def test_native_template_gets_the_tools_and_tool_messages(retrieval_env):
    tokenizer = tokenizer_with(TOOL_TEMPLATE)
    agent = ToolAgent(tokenizer=tokenizer)
    replies = [
        '<tool_call>{"name": "search", "arguments": {"query": "Sekrous Pirkdrifur"}}</tool_call>'
        '<tool_call>{"name": "open_document", "arguments": {"doc_id": "person-09"}}</tool_call>',
        "<answer>Kreaxreas</answer>",
    ]
    play(agent, retrieval_env, replies)
    messages = agent.chat_completions
    assert agent.trajectory.steps[-1].reward == 1.0
    assert [message["role"] for message in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert [message["name"] for message in messages[3:5]] == ["search", "open_document"]
    assert "born in the town of Kreaxreas" in messages[4]["content"]
    rendered = tokenizer.apply_chat_template(messages[:5], tools=agent.tools, tokenize=False)
    assert '"name": "open_document"' in rendered and "<|im_start|>tool\n" in rendered


def test_template_without_tools_falls_back_to_a_system_prompt(retrieval_env):
    agent = ToolAgent(tokenizer=tokenizer_with(PLAIN_TEMPLATE))
    play(
        agent,
        retrieval_env,
        ['{"name": "open_document", "arguments": {"doc_id": "person-09"}}', "It is Kreaxreas"],
    )
    messages = agent.chat_completions
    assert agent.tools is None
    assert '"name": "search"' in messages[0]["content"] and "<tool_call>" in messages[0]["content"]
    assert [message["role"] for message in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert agent.trajectory.steps[-1].reward == 0.0  # "It is Kreaxreas" is not the exact answer


def test_engine_tool_calls_are_sent_to_the_env(retrieval_env):
    agent = ToolAgent()  # an OpenAI-compatible engine renders the tools itself
    observation, info = retrieval_env.reset(seed=0)
    agent.update_from_env(observation, 0.0, False, info)
    assert [tool["function"]["name"] for tool in agent.tools] == ["search", "open_document"]
    action = agent.update_from_model(
        "",
        tool_calls=[
            {
                "type": "function",
                "function": {
                    "name": "open_document",
                    "arguments": json.dumps({"doc_id": "town-00"}),
                },
            }
        ],
    )
    observation, *_ = retrieval_env.step(action.action)
    assert "[town-00]" in observation
    assert agent.chat_completions[-1]["tool_calls"][0]["function"]["name"] == "open_document"


@pytest.mark.slow
def test_execution_engine_runs_tool_agent_episodes_with_a_real_local_model():
    require_module("torch", "the local engine needs torch")
    from rllm_agents.engines.base import SamplingParams
    from rllm_agents.engines.local import LocalEngine
    from rllm_agents.execution import AgentExecutionEngine
    from rllm_agents.models import load_tokenizer
    from rllm_agents.types import TerminationReason

    tokenizer = load_tokenizer("tiny")  # SmolLM2's tokenizer and chat template
    # SmolLM2's template ignores tools: the schemas go into the system prompt.
    assert ToolAgent(tokenizer=tokenizer).native_tools is False
    engine = LocalEngine.from_name("tiny")
    runner = AgentExecutionEngine(
        lambda: ToolAgent(tokenizer=tokenizer),
        lambda: MCPEnv(tasks="shipped:test"),
        engine,
        tokenizer=tokenizer,
        n_parallel=2,
        max_turns=2,
        sampling=SamplingParams(max_tokens=8, temperature=1.0, seed=0),
    )
    try:
        episodes = runner.run(seeds=[0, 1])
    finally:
        engine.close()
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.failure is None and episode.termination_reason in {
            TerminationReason.ENV_DONE,
            TerminationReason.MAX_TURNS,
        }
        trajectory = episode.trajectories[0]
        assert trajectory.steps and len(trajectory.response_ids) == len(trajectory.response_mask)
        assert 1 in trajectory.response_mask
        assert '"name": "open_document"' in trajectory.steps[0].chat_completions[0]["content"]
