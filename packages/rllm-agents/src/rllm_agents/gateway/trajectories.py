"""Token-exact training sequences from one session's recorded calls.

``build_sequences(calls)`` walks a session's calls in arrival order and puts each into a
sequence (one :class:`~rllm_agents.types.Trajectory` each):

* **merged** - the call's prompt ids start with all the ids of an open sequence (its first
  prompt, then every completion and every token in between): the call is appended to it. The
  prompt's new tokens (the template's glue, tool results, the next user turn) get mask 0 and
  logprob 0, the completion mask 1 and its logprobs. The longest such sequence wins.
* **split** - otherwise the call starts a new sequence whose prompt is its whole prompt. The
  :class:`SplitNote` says why, from the nearest earlier sequence:

  - ``branch``: the prompt continues that sequence as it stood after one of its earlier calls
    (or its first prompt): the sibling choices of an ``n > 1`` call, a retried turn, a search
    tree. Nothing was rewritten; the branch is a sequence of its own.
  - ``template``: the call's messages continue an earlier call's conversation with its reply
    sent back as the gateway returned it, yet the tokens do not continue: the chat template
    rewrote what the model saw (e.g. dropped an earlier ``<think>`` block), or it does not
    render a reply or its tool calls as the model wrote them.
  - ``program``: the program changed the history: it edited the model's reply, or kept the
    start of an earlier conversation and changed or dropped later messages (e.g. compaction).
  - ``new``: the prompt shares no history with earlier calls (another conversation).

A sequence is never spliced from tokens the model did not see in that order, and every
generated token is trained in exactly one sequence (mask 1 once): a branch or split sequence
holds the shared history as prompt (mask 0).

Calls without token ids (an engine that reports none) are rendered with `tokenizer` when one
is given - the prompt with the chat template, the completion re-tokenised - and counted as
``retokenised`` (not token-exact); without a tokenizer they are left out and counted as
``skipped``.

The sequences fit the trainers as they are: ``prompt_ids`` + ``response_ids`` is the token
sequence, ``response_mask`` 1 marks the tokens to train, ``response_logprobs`` are the
engine's (0 under mask 0), and ``steps`` hold one :class:`~rllm_agents.types.Step` per call
(its own prompt and completion) for trainers that train call by call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.chat.tito import Segment
from rllm_agents.chat.tool_calls import TOOL_CALL_BLOCK
from rllm_agents.gateway.sessions import RecordedCall
from rllm_agents.types import Step, Trajectory

SPLIT_REASONS = ("branch", "template", "program", "new")


@dataclass(frozen=True)
class SplitNote:
    """Why a call started a new sequence instead of extending an earlier one."""

    call: int  # the call's index
    choice: int  # its choice index
    reason: str  # one of SPLIT_REASONS
    nearest_sequence: int | None  # the sequence sharing the longest token prefix
    common_tokens: int  # how many leading tokens the prompt shares with it
    sequence_tokens: int  # that sequence's length when the call arrived


@dataclass
class SequenceReport:
    """How a session's calls became sequences (sum several with :meth:`total`)."""

    sessions: int = 0
    calls: int = 0
    sequences: int = 0
    merged_calls: int = 0  # appended to an earlier call's sequence
    split_calls: int = 0  # started a new sequence after the session's first call
    retokenised_calls: int = 0  # had no token ids: rendered with the tokenizer (not exact)
    skipped_calls: int = 0  # had no token ids and no tokenizer was given
    sessions_merged: int = 0  # sessions of several calls that came out as one sequence
    sessions_split: int = 0  # sessions that came out as several sequences
    splits: list[SplitNote] = field(default_factory=list)

    @property
    def split_reasons(self) -> Counter:
        return Counter(note.reason for note in self.splits)

    @property
    def rewritten_calls(self) -> int:
        """Splits where history was rewritten (by the template or the program)."""
        return sum(1 for note in self.splits if note.reason in ("template", "program"))

    @classmethod
    def total(cls, reports: Iterable[SequenceReport]) -> SequenceReport:
        summed = cls()
        for report in reports:
            for name in cls.__dataclass_fields__:
                if name != "splits":
                    setattr(summed, name, getattr(summed, name) + getattr(report, name))
            summed.splits.extend(report.splits)
        return summed

    def to_dict(self) -> dict[str, Any]:
        counts = {name: getattr(self, name) for name in self.__dataclass_fields__}
        counts.pop("splits")
        return {**counts, "split_reasons": dict(self.split_reasons)}


@dataclass
class _Sequence:
    """A sequence being built: its tokens, the calls in it, where each call ended."""

    tokens: Segment
    calls: list[RecordedCall] = field(default_factory=list)
    boundaries: list[int] = field(default_factory=list)  # lengths after the prompt, each call
    origin: str = "start"

    @classmethod
    def starting(cls, prompt_ids: list[int]) -> _Sequence:
        return cls(Segment(list(prompt_ids)), boundaries=[len(prompt_ids)])

    @property
    def length(self) -> int:
        return len(self.tokens.prompt_ids) + len(self.tokens.response_ids)

    def append(self, call: RecordedCall, prompt_ids: list[int], completion: _Completion) -> None:
        self.tokens.extend(prompt_ids[self.length :], mask=0)
        self.add_completion(call, completion)

    def add_completion(self, call: RecordedCall, completion: _Completion) -> None:
        self.tokens.extend(completion.ids, mask=1, logprobs=completion.logprobs)
        self.calls.append(call)
        self.boundaries.append(self.length)


@dataclass(frozen=True)
class _Completion:
    prompt_ids: list[int]
    ids: list[int]
    logprobs: list[float]
    exact: bool


def build_sequences(
    calls: Sequence[RecordedCall], tokenizer: Any = None
) -> tuple[list[Trajectory], SequenceReport]:
    """One session's calls as token-exact sequences, and how they were merged and split."""
    report = SequenceReport(sessions=1 if calls else 0)
    sequences: list[_Sequence] = []
    ordered = sorted(calls, key=lambda call: (call.index, call.choice_index))
    for call in ordered:
        report.calls += 1
        completion = _tokens_of(call, tokenizer)
        if completion is None:
            report.skipped_calls += 1
            continue
        if not completion.exact:
            report.retokenised_calls += 1
        prompt = completion.prompt_ids
        target = _longest_extended(sequences, prompt)
        if target is not None:
            target.append(call, prompt, completion)
            report.merged_calls += 1
            continue
        sequence = _Sequence.starting(prompt)
        if sequences:
            note = _split_note(sequences, call, prompt)
            sequence.origin = note.reason
            report.split_calls += 1
            report.splits.append(note)
        sequence.add_completion(call, completion)
        sequences.append(sequence)
    report.sequences = len(sequences)
    if len(sequences) > 1:
        report.sessions_split = 1
    elif len(sequences) == 1 and len(sequences[0].calls) > 1:
        report.sessions_merged = 1
    return [_trajectory(number, seq) for number, seq in enumerate(sequences)], report


def _tokens_of(call: RecordedCall, tokenizer: Any) -> _Completion | None:
    exact = bool(call.prompt_ids) and bool(call.completion_ids)
    if exact:
        prompt_ids, ids = list(call.prompt_ids), list(call.completion_ids)
    elif tokenizer is not None and call.messages is not None:
        from rllm_agents.chat.tito import encode, render_prompt_ids

        prompt_ids = list(call.prompt_ids) or render_prompt_ids(
            tokenizer, call.messages, call.tools
        )
        ids = list(call.completion_ids) or encode(tokenizer, call.text)
    else:
        return None
    logprobs = list(call.logprobs) if len(call.logprobs) == len(ids) else [0.0] * len(ids)
    return _Completion(prompt_ids, ids, logprobs, exact)


def _longest_extended(sequences: list[_Sequence], prompt: list[int]) -> _Sequence | None:
    best = None
    for sequence in sequences:
        if best is not None and sequence.length <= best.length:
            continue
        if sequence.length <= len(prompt) and _starts_with(prompt, sequence):
            best = sequence
    return best


def _starts_with(prompt: list[int], sequence: _Sequence) -> bool:
    tokens = sequence.tokens
    head = len(tokens.prompt_ids)
    return prompt[:head] == tokens.prompt_ids and prompt[head : sequence.length] == (
        tokens.response_ids
    )


def _common_prefix(a: list[int], b: list[int]) -> int:
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    low, high = 0, limit  # a[:low] == b[:low] holds, a[:high] == b[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


def _split_note(sequences: list[_Sequence], call: RecordedCall, prompt: list[int]) -> SplitNote:
    shared = [
        (_common_prefix(prompt, seq.tokens.ids), number) for number, seq in enumerate(sequences)
    ]
    common, nearest = max(shared, key=lambda item: (item[0], -item[1]))  # earliest on ties
    return SplitNote(
        call=call.index,
        choice=call.choice_index,
        reason=_split_reason(sequences, shared, call, prompt),
        nearest_sequence=nearest,
        common_tokens=common,
        sequence_tokens=sequences[nearest].length,
    )


def _split_reason(
    sequences: list[_Sequence], shared: list[tuple[int, int]], call: RecordedCall, prompt: list[int]
) -> str:
    earlier = [c for seq in sequences for c in seq.calls if c.messages is not None]
    if call.messages is not None:
        for previous in earlier:
            reply = _reply_after(previous.messages, call.messages)
            if reply is None:
                continue
            if _extends(prompt, previous.prompt_ids, previous.completion_ids):
                return "branch"  # a second continuation of the same turn (a retry, a fork)
            return "template" if _as_returned(reply, previous) else "program"
    # Token level: the prompt continues a sequence as it stood after its first prompt or after
    # one of its calls (n > 1 siblings share the first prompt).
    for common, number in shared:
        if any(boundary <= common for boundary in sequences[number].boundaries):
            return "branch"
    if call.messages is not None and any(
        _shared_start(previous.messages, call.messages) for previous in earlier
    ):
        return "program"
    return "new"


def _reply_after(
    previous: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The assistant message that follows `previous` at the start of `messages`, if any."""
    head = len(previous)
    if len(messages) > head and messages[:head] == previous:
        message = messages[head]
        return message if message.get("role") == "assistant" else None
    return None


def _extends(prompt: list[int], head: list[int], tail: list[int]) -> bool:
    return len(prompt) >= len(head) + len(tail) and (
        prompt[: len(head)] == head and prompt[len(head) : len(head) + len(tail)] == tail
    )


def _as_returned(reply: dict[str, Any], call: RecordedCall) -> bool:
    """Whether the program sent the reply back as the gateway returned it (up to whitespace)."""
    content = str(reply.get("content") or "").strip()
    return content in (call.text.strip(), TOOL_CALL_BLOCK.sub("", call.text).strip())


def _shared_start(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Whether two message lists agree up to and including their first non-system message."""
    for first, second in zip(a, b, strict=False):
        if first != second:
            return False
        if first.get("role") != "system":
            return True
    return False


def _trajectory(number: int, sequence: _Sequence) -> Trajectory:
    tokens = sequence.tokens
    return Trajectory(
        prompt_ids=tokens.prompt_ids,
        response_ids=tokens.response_ids,
        response_mask=tokens.response_mask,
        response_logprobs=tokens.response_logprobs,
        steps=[_step(call) for call in sequence.calls],
        info={
            "sequence": number,
            "origin": sequence.origin,
            "calls": [[call.index, call.choice_index] for call in sequence.calls],
        },
    )


def _step(call: RecordedCall) -> Step:
    reply: dict[str, Any] = {"role": "assistant", "content": call.text}
    if call.tool_calls:
        reply["tool_calls"] = call.tool_calls
    return Step(
        model_response=call.text,
        chat_completions=[*(call.messages or []), reply],
        prompt_ids=call.prompt_ids,
        response_ids=call.completion_ids,
        logprobs=call.logprobs,
        finish_reason=call.finish_reason,
        llm_time=call.latency_s,
        info={"call": call.index, "choice": call.choice_index, "tool_calls": call.tool_calls},
    )
