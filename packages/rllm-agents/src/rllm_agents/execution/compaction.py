"""Context compaction: what the execution engine does when an episode's next prompt would pass
its context budget (``EpisodeLimits.max_context_tokens``), instead of ending the episode.

A policy rewrites the conversation the model sees; the agent's own history is left whole. From
then on the model sees the compacted context followed by every message the agent adds, until
the next compaction (:class:`ContextView`). Policies, by name (``CompactionSettings.policy``):

* ``none``: no compaction; the episode ends ``prompt_too_long`` as before.
* ``last_turns``: keep the task (system messages and the first user message) and the last
  ``keep_turns`` turns, with a note saying how many turns were removed.
* ``drop_tool_outputs``: cut the env's and tools' messages older than the last ``keep_turns``
  turns to ``keep_chars`` characters (their start and end).
* ``summarize``: the policy model itself summarises the conversation, asked with
  ``summary_prompt``; the new context is the task and that summary. The summary is a generated
  turn: it is trained on like any other.
* ``summarize_with``: the same, written by another engine (``summary_engine``, e.g. a larger
  model): the summary is context, never trained on.
* ``"module:function"``: a user's own rewrite, ``function(messages, settings) -> messages``
  (None when it has nothing to remove).

A compacted context is made to fit ``target`` (a share of the budget) so the turns after it fit
too: a rewrite that does not is followed by ``last_turns`` with fewer and fewer turns; a context
that cannot fit the budget even then ends the episode ``prompt_too_long``. A summary is asked
for in a context that leaves it room (older turns dropped first where needed). Each compaction starts
a new token sequence (the prompt exactly as the model saw it), so every generated token is
trained once (``Trajectory.sequences``), and each is recorded in the trajectory's
``info["compactions"]`` (:class:`CompactionRecord`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

Messages = list[dict[str, Any]]
Rewrite = Callable[[Messages, "CompactionSettings"], "Messages | None"]

DEFAULT_SUMMARY_PROMPT = (
    "The conversation is about to outgrow the context. Summarise it for yourself: the task, "
    "what you have tried, what you learnt from the environment, and what to do next. Write "
    "only the summary."
)
SUMMARY_INTRODUCTION = "Summary of the work so far (it replaces the earlier turns):\n"
# Room kept below the budget for the summary request itself (its instruction and template).
SUMMARY_REQUEST_TOKENS = 96


def anchor_length(messages: Messages) -> int:
    """How many leading messages are the task: every system message, then the first user one."""
    for index, message in enumerate(messages):
        if message.get("role") != "system":
            return index + 1
    return len(messages)


def split_turns(messages: Messages) -> list[Messages]:
    """`messages` (after the task) as turns: each assistant message with what follows it (a
    prelude before the first assistant message is a turn of its own)."""
    turns: list[Messages] = []
    for message in messages:
        if message.get("role") == "assistant" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def keep_last_turns(messages: Messages, keep: int) -> Messages | None:
    """The task, a note, and the last `keep` turns; None when there is nothing older."""
    anchor = anchor_length(messages)
    turns = split_turns(messages[anchor:])
    if len(turns) <= keep:
        return None
    removed = len(turns) - keep
    note = {
        "role": "user",
        "content": f"[{removed} earlier turn{'s' if removed != 1 else ''} removed to fit the "
        "context.]",
    }
    kept = [message for turn in turns[len(turns) - keep :] for message in turn]
    return messages[:anchor] + [note] + kept


def last_turns(messages: Messages, settings: CompactionSettings) -> Messages | None:
    return keep_last_turns(messages, settings.keep_turns)


def clipped(text: str, keep: int) -> str:
    if len(text) <= keep:
        return text
    half = keep // 2
    return f"{text[:half]}[... {len(text) - 2 * half} characters removed ...]{text[-half:]}"


def drop_tool_outputs(messages: Messages, settings: CompactionSettings) -> Messages | None:
    anchor = anchor_length(messages)
    turns = split_turns(messages[anchor:])
    old = len(turns) - settings.keep_turns
    rewritten, changed = list(messages[:anchor]), False
    for index, turn in enumerate(turns):
        for message in turn:
            content = message.get("content")
            if index < old and message.get("role") != "assistant" and isinstance(content, str):
                shorter = clipped(content, settings.keep_chars)
                changed = changed or shorter != content
                message = {**message, "content": shorter}
            rewritten.append(message)
    return rewritten if changed else None


def summary_context(messages: Messages, summary: str) -> Messages:
    """The context after a summary: the task, then the summary."""
    head = messages[: anchor_length(messages)]
    return head + [{"role": "user", "content": SUMMARY_INTRODUCTION + summary.strip()}]


@dataclass(frozen=True)
class PolicyKind:
    """What a built-in policy does: rewrite the messages, or have a summary written (by the
    policy model, trained, or by another engine, not trained)."""

    rewrite: Rewrite | None = None
    summary_by: str | None = None  # "policy" | "other"


POLICIES: Mapping[str, PolicyKind] = MappingProxyType(
    {
        "none": PolicyKind(),
        "last_turns": PolicyKind(rewrite=last_turns),
        "drop_tool_outputs": PolicyKind(rewrite=drop_tool_outputs),
        "summarize": PolicyKind(summary_by="policy"),
        "summarize_with": PolicyKind(summary_by="other"),
    }
)


def policy_kind(name: str) -> PolicyKind:
    """The built-in policy `name`, or a user's ``module:function`` rewrite."""
    if name in POLICIES:
        return POLICIES[name]
    if ":" in name:
        from rllm_envs.core.loading import load_attr

        return PolicyKind(rewrite=load_attr(name, what="compaction policy"))
    raise ValueError(
        f"unknown compaction policy {name!r}; choose from {sorted(POLICIES)} or give "
        "'module:function' (a rewrite of the messages)"
    )


@dataclass(frozen=True)
class CompactionSettings:
    """How an episode's context is compacted (module docstring)."""

    policy: str = "none"
    keep_turns: int = 2  # last_turns, drop_tool_outputs: recent turns kept whole
    keep_chars: int = 200  # drop_tool_outputs: what is left of an older output
    summary_prompt: str = DEFAULT_SUMMARY_PROMPT
    summary_tokens: int = 256  # summarize*: the summary's token limit
    summary_engine: Any = None  # summarize_with: a RolloutEngine
    # A compacted context is made to fit this share of the budget (older turns go until it
    # does), so that the turns after it fit too rather than compacting again at once.
    target: float = 0.75

    def __post_init__(self) -> None:
        kind = policy_kind(self.policy)
        if self.keep_turns < 0 or self.keep_chars < 20 or self.summary_tokens < 1:
            raise ValueError("keep_turns >= 0, keep_chars >= 20 and summary_tokens >= 1")
        if not 0.1 <= self.target <= 1.0:
            raise ValueError(f"target must be between 0.1 and 1, got {self.target}")
        if kind.summary_by == "other" and self.summary_engine is None:
            raise ValueError("compaction policy summarize_with needs a summary_engine")

    @property
    def kind(self) -> PolicyKind:
        return policy_kind(self.policy)

    @property
    def enabled(self) -> bool:
        return self.policy != "none"

    def reserve(self) -> int:
        """Tokens kept free below the budget before compacting: a summary's request and
        reply must fit in the context it is asked in."""
        if self.kind.summary_by is None:
            return 0
        return self.summary_tokens + SUMMARY_REQUEST_TOKENS


@dataclass
class ContextView:
    """What the model sees of an agent's history: after a compaction, `head` in place of the
    agent's first `anchor` messages."""

    anchor: int = 0
    head: Messages = field(default_factory=list)

    def messages(self, history: Messages) -> Messages:
        if not self.anchor and not self.head:
            return list(history)
        return list(self.head) + list(history[self.anchor :])


@dataclass(frozen=True)
class CompactionRecord:
    """One compaction, as the trajectory's ``info["compactions"]`` keeps it."""

    turn: int  # the agent turn whose prompt it made fit (0-based)
    policy: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    summary_trained: bool = False  # written by the policy model, in a trained sequence
    summary_tokens: int = 0  # the summary's tokens, as generated (trained when summary_trained)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
