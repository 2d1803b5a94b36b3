"""build_sequences on recorded calls: merge rules, split reasons, the report."""

from __future__ import annotations

from rllm_agents.chat.tito import encode, render_prompt_ids
from rllm_agents.gateway import RecordedCall, SequenceReport, build_sequences


def call(index, prompt, completion, *, messages=None, text="", choice=0, logprobs=None):
    return RecordedCall(
        index=index,
        messages=messages,
        tools=None,
        prompt_ids=list(prompt),
        completion_ids=list(completion),
        logprobs=list(logprobs if logprobs is not None else [-0.5] * len(completion)),
        text=text,
        tool_calls=[],
        finish_reason="stop",
        sampling={},
        started=0.0,
        latency_s=0.01,
        choice_index=choice,
        endpoint="chat" if messages is not None else "completions",
    )


def test_calls_that_extend_the_sequence_merge_with_masks_and_logprobs():
    calls = [
        call(0, [1, 2], [3, 4], logprobs=[-0.1, -0.2]),
        call(1, [1, 2, 3, 4, 9], [5], logprobs=[-0.3]),
        call(2, [1, 2, 3, 4, 9, 5, 8, 8], [6, 7], logprobs=[-0.4, -0.5]),
    ]
    [sequence], report = build_sequences(calls)
    assert sequence.prompt_ids == [1, 2]
    assert sequence.response_ids == [3, 4, 9, 5, 8, 8, 6, 7]
    assert sequence.response_mask == [1, 1, 0, 1, 0, 0, 1, 1]
    assert sequence.response_logprobs == [-0.1, -0.2, 0.0, -0.3, 0.0, 0.0, -0.4, -0.5]
    assert [step.response_ids for step in sequence.steps] == [[3, 4], [5], [6, 7]]
    assert sequence.info["calls"] == [[0, 0], [1, 0], [2, 0]]
    assert report.to_dict() == {
        "sessions": 1,
        "calls": 3,
        "sequences": 1,
        "merged_calls": 2,
        "split_calls": 0,
        "retokenised_calls": 0,
        "skipped_calls": 0,
        "sessions_merged": 1,
        "sessions_split": 0,
        "split_reasons": {},
    }


def test_split_reasons_tell_branches_rewrites_and_new_conversations_apart():
    user = {"role": "user", "content": "Q"}
    reply = {"role": "assistant", "content": "A"}
    follow = {"role": "user", "content": "Q2"}
    calls = [
        call(0, [1, 2], [3], messages=[user], text="A"),
        # The same turn asked again: continues the sequence as it stood after call 0.
        call(1, [1, 2, 3, 7], [4], messages=[user, reply, follow], text="B"),
        call(2, [1, 2, 3, 7], [5], messages=[user, reply, follow], text="C"),
        # The reply sent back as returned, yet other tokens: the template rewrote it.
        call(3, [1, 2, 9, 7], [6], messages=[user, reply, follow], text="D"),
        # The program edited the model's reply.
        call(4, [1, 2, 8, 7], [6], messages=[user, {**reply, "content": "edited"}, follow]),
        # The program kept the start of the conversation and dropped the rest.
        call(5, [1, 5, 5], [6], messages=[user, {"role": "user", "content": "summary"}]),
        call(6, [42], [43], messages=[{"role": "user", "content": "other"}]),
        call(7, [1, 2], [11], messages=[user], choice=1),  # a sibling choice
    ]
    calls[7].index = 0  # the sibling of call 0
    sequences, report = build_sequences(calls)
    reasons = {(note.call, note.choice): note.reason for note in report.splits}
    assert reasons == {
        (0, 1): "branch",
        (2, 0): "branch",
        (3, 0): "template",
        (4, 0): "program",
        (5, 0): "program",
        (6, 0): "new",
    }
    assert report.merged_calls == 1 and report.sequences == 7
    assert report.rewritten_calls == 3 and report.sessions_split == 1
    # Every generated token is trained in exactly one sequence.
    trained = sum(sum(s.response_mask) for s in sequences)
    assert trained == sum(len(c.completion_ids) for c in calls)
    note = next(n for n in report.splits if n.call == 3)
    assert (note.nearest_sequence, note.common_tokens) == (0, 2)


def test_calls_without_ids_are_rendered_with_a_tokenizer_or_skipped(smollm2_tokenizer):
    messages = [{"role": "user", "content": "Hello"}]
    bare = call(0, [], [], messages=messages, text="Hi there", logprobs=[])
    [sequence], report = build_sequences([bare], tokenizer=smollm2_tokenizer)
    assert sequence.prompt_ids == render_prompt_ids(smollm2_tokenizer, messages)
    assert sequence.response_ids == encode(smollm2_tokenizer, "Hi there")
    assert sequence.response_logprobs == [0.0] * len(sequence.response_ids)
    assert report.retokenised_calls == 1
    sequences, report = build_sequences([bare])
    assert sequences == [] and report.skipped_calls == 1


def test_reports_add_up_across_sessions():
    one = build_sequences([call(0, [1], [2]), call(1, [1, 2, 3], [4])])[1]
    two = build_sequences([call(0, [1], [2]), call(1, [5], [6])])[1]
    empty = build_sequences([])[1]
    total = SequenceReport.total([one, two, empty])
    assert (total.sessions, total.calls, total.sequences) == (2, 4, 3)
    assert (total.sessions_merged, total.sessions_split) == (1, 1)
    assert total.split_reasons == {"new": 1}
