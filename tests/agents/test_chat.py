"""Token-in/token-out rendering on real chat templates, and tool-call parsing."""

from __future__ import annotations

import pytest
from rllm_agents.chat import (
    TokenConversation,
    ToolCall,
    encode,
    parse_openai_tool_calls,
    parse_tool_calls,
    render_text,
    template_rewrites_history,
    tool_calls_to_text,
)

SYSTEM = {"role": "system", "content": "Solve the puzzle."}
REPLIES = [
    "<think>\nThe hole is below.\n</think>\n\nI go `Right`.<|im_end|>",
    "<think>\nNow down twice.\n</think>\n\n`Down`<|im_end|>",
    "`Down`",  # cut off by the token limit: no end-of-turn token
]
OBSERVATIONS = ["Board 1: P F\nF G", "Board 2: S P\nF G", "Board 3: S F\nF P"]


def play(tokenizer, replies=REPLIES, keep_history=True):
    """Run a scripted conversation; return (conversation, prompts, completions, messages)."""
    conversation = TokenConversation(tokenizer)
    messages = [SYSTEM, {"role": "user", "content": OBSERVATIONS[0]}]
    prompts, completions = [], []
    for turn, reply in enumerate(replies):
        prompts.append(list(conversation.prompt_ids(messages)))
        completion = encode(tokenizer, reply)
        completions.append(completion)
        conversation.add_completion(completion, [-0.5] * len(completion))
        text = reply.removesuffix("<|im_end|>")
        if not keep_history and "</think>" in text:
            text = text.split("</think>")[-1].lstrip("\n")
        messages = messages + [{"role": "assistant", "content": text}]
        if turn + 1 < len(OBSERVATIONS):
            messages.append({"role": "user", "content": OBSERVATIONS[turn + 1]})
    return conversation, prompts, completions, messages


@pytest.mark.parametrize("tokenizer_name", ["smollm2_tokenizer", "qwen_style_tokenizer"])
def test_each_prompt_extends_previous_prompt_and_completion(request, tokenizer_name):
    tokenizer = request.getfixturevalue(tokenizer_name)
    conversation, prompts, completions, _ = play(tokenizer, REPLIES[:2])
    assert prompts[1][: len(prompts[0]) + len(completions[0])] == prompts[0] + completions[0]
    assert conversation.prefix_consistent
    segment = conversation.segments[0]
    assert segment.prompt_ids == prompts[0]
    assert segment.ids[: len(prompts[1])] == prompts[1]


def test_mask_is_one_exactly_on_generated_tokens(smollm2_tokenizer):
    conversation, prompts, completions, _ = play(smollm2_tokenizer)
    segment = conversation.segments[0]
    generated = [
        token
        for token, mask in zip(segment.response_ids, segment.response_mask, strict=True)
        if mask
    ]
    assert generated == [token for completion in completions for token in completion]
    assert len(segment.response_logprobs) == len(segment.response_ids)
    assert all(
        (logprob == -0.5) == bool(mask)
        for logprob, mask in zip(segment.response_logprobs, segment.response_mask, strict=True)
    )
    # Each completion sits right after its prompt in the sequence.
    for prompt, completion in zip(prompts, completions, strict=True):
        assert segment.ids[len(prompt) : len(prompt) + len(completion)] == completion


def test_sequence_text_equals_full_render_on_smollm2(smollm2_tokenizer):
    conversation, _, _, messages = play(smollm2_tokenizer, REPLIES[:2])
    rendered = render_text(smollm2_tokenizer, messages[:-1], add_generation_prompt=False)
    decoded = smollm2_tokenizer.decode(conversation.segments[0].ids, skip_special_tokens=False)
    # The template closes the last assistant turn with a newline the model never generates.
    assert decoded + "\n" == rendered


def test_truncated_completion_gets_its_end_of_turn_glue(smollm2_tokenizer):
    conversation = TokenConversation(smollm2_tokenizer)
    messages = [SYSTEM, {"role": "user", "content": "hi"}]
    conversation.prompt_ids(messages)
    conversation.add_completion(encode(smollm2_tokenizer, "Hello the"))  # stopped by length
    messages += [
        {"role": "assistant", "content": "Hello the"},
        {"role": "user", "content": "go on"},
    ]
    ids = conversation.prompt_ids(messages)
    text = smollm2_tokenizer.decode(ids, skip_special_tokens=False)
    assert "Hello the<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n" in text


def test_history_rewriting_template_is_detected(smollm2_tokenizer, qwen_style_tokenizer):
    assert template_rewrites_history(qwen_style_tokenizer)
    assert not template_rewrites_history(smollm2_tokenizer)


def test_rewriting_template_keeps_the_thinking_the_model_saw(qwen_style_tokenizer):
    conversation, _, _, messages = play(qwen_style_tokenizer, REPLIES[:2])
    decoded = qwen_style_tokenizer.decode(conversation.segments[0].ids, skip_special_tokens=False)
    assert "The hole is below." in decoded  # kept as generated, not re-rendered away
    rerendered = render_text(qwen_style_tokenizer, messages, add_generation_prompt=False)
    assert "The hole is below." not in rerendered


def test_agent_that_drops_history_starts_a_new_segment(smollm2_tokenizer):
    conversation, prompts, _, _ = play(smollm2_tokenizer, REPLIES[:2], keep_history=False)
    assert not conversation.prefix_consistent
    assert len(conversation.segments) == 2
    assert "The hole is below." not in smollm2_tokenizer.decode(prompts[1])


def test_calls_out_of_order_raise(smollm2_tokenizer):
    conversation = TokenConversation(smollm2_tokenizer)
    with pytest.raises(RuntimeError):
        conversation.add_completion([1, 2])
    conversation.prompt_ids([SYSTEM, {"role": "user", "content": "x"}])
    with pytest.raises(RuntimeError):
        conversation.prompt_ids([SYSTEM, {"role": "user", "content": "x"}])


def test_parse_tool_call_blocks():
    text = (
        'Let me look. <tool_call>{"name": "search", "arguments": {"q": "rl"}}</tool_call>\n'
        "<tool_call>not json</tool_call>"
        '<tool_call>{"name": "clock", "arguments": "{}"}</tool_call>'
    )
    assert parse_tool_calls(text) == [
        ToolCall("search", {"q": "rl"}),
        ToolCall("clock", {}),
    ]
    assert parse_tool_calls("no calls here") == []


def test_parse_openai_tool_calls_and_back_to_text():
    raw = [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
        {"id": "c2", "type": "function", "function": {"name": "bad", "arguments": "{oops"}},
    ]
    calls = parse_openai_tool_calls(raw)
    assert calls == [ToolCall("add", {"a": 1}, id="c1")]
    assert parse_tool_calls(tool_calls_to_text(calls)) == [ToolCall("add", {"a": 1})]
    assert calls[0].to_openai()["function"]["arguments"] == '{"a": 1}'
