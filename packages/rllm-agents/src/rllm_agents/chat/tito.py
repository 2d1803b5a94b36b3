"""Token-in/token-out rendering of multi-turn conversations.

Training on a multi-turn rollout needs one token sequence in which every model turn is exactly
the tokens the model generated, and every prompt the model saw is a prefix of that sequence.
Re-rendering the whole history with the chat template each turn breaks this in two ways: the
completion is re-tokenised (a different but equal-text token split), and some templates rewrite
history (Qwen3-style templates drop earlier ``<think>`` blocks). :class:`TokenConversation`
therefore never re-renders what it already has. It keeps the token prefix and appends:

* the completion ids as generated (mask 1, with their logprobs);
* the template's glue after an assistant turn plus the new env/user/tool messages and the next
  generation prompt, rendered from the template on a fixed reference conversation (mask 0).

If the agent itself rewrites history (e.g. drops a ``<think>`` block from its reply, or
edits an earlier message), the
token sequence can no longer match its messages: the conversation starts a new *segment*
rendered from the agent's messages, and :attr:`TokenConversation.segments` records it so a
trainer never learns from tokens the model did not see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Content of the reference assistant turn: text no template changes and no reply contains.
_MARKER = "\u2063rllm-assistant-turn\u2063"
_REFERENCE_HEAD = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": _MARKER},
]


def render_text(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> str:
    """The chat template applied to `messages`, as text."""
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
    if tools:
        kwargs["tools"] = tools
    return tokenizer.apply_chat_template(messages, **kwargs)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of rendered template text (special tokens are already written out in it)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def render_prompt_ids(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> list[int]:
    """Token ids of `messages` followed by the generation prompt."""
    return encode(
        tokenizer, render_text(tokenizer, messages, tools=tools, add_generation_prompt=True)
    )


def text_after_assistant_turn(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> str:
    """What the template writes after an assistant turn's content when `messages` follow it.

    That is the turn's closing glue (e.g. ``<|im_end|>\\n``), the `messages` themselves and the
    next generation prompt.
    """
    rendered = render_text(
        tokenizer, _REFERENCE_HEAD + list(messages), tools=tools, add_generation_prompt=True
    )
    if rendered.count(_MARKER) != 1:
        raise ValueError("the chat template does not render assistant content verbatim")
    return rendered.split(_MARKER, 1)[1]


def emitted_glue_length(tokenizer: Any, completion_text: str, glue: str) -> int:
    """How much of the closing `glue` the model already wrote (e.g. its final ``<|im_end|>``).

    Only prefixes of the glue that end with a special token count, so a reply cut off by the
    token limit that happens to end in ``<`` is not mistaken for a closed turn.
    """
    best = 0
    for special in getattr(tokenizer, "all_special_tokens", []):
        start = glue.find(special)
        while start != -1:
            end = start + len(special)
            if end > best and completion_text.endswith(glue[:end]):
                best = end
            start = glue.find(special, start + 1)
    return best


def template_rewrites_history(tokenizer: Any) -> bool:
    """Whether re-rendering a longer conversation changes an earlier turn (e.g. drops thinking).

    Such a template cannot be used by re-rendering the full history each turn; the incremental
    rendering of :class:`TokenConversation` is prefix-consistent anyway.
    """
    first = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n2"},
    ]
    longer = first + [{"role": "user", "content": "And 2 + 2?"}]
    return not render_text(tokenizer, longer).startswith(render_text(tokenizer, first))


@dataclass
class Segment:
    """A prefix-consistent stretch of the conversation: one prompt, then everything after it."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)

    def extend(self, ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        self.response_ids.extend(ids)
        self.response_mask.extend([mask] * len(ids))
        self.response_logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids


@dataclass
class TokenConversation:
    """Builds the token sequence of one multi-turn conversation (see the module docstring)."""

    tokenizer: Any
    tools: list[dict[str, Any]] | None = None
    segments: list[Segment] = field(default_factory=list)
    _seen: list[dict[str, Any]] = field(default_factory=list)
    _awaiting_completion: bool = False
    _last_completion: list[int] = field(default_factory=list)

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The token prompt for the next model turn, given the agent's full message list."""
        if self._awaiting_completion:
            raise RuntimeError("prompt_ids called twice without add_completion in between")
        added = self._continuation(messages)
        if added is None:
            self.segments.append(Segment(render_prompt_ids(self.tokenizer, messages, self.tools)))
        else:
            self.segments[-1].extend(added, mask=0)
        self._seen = [dict(message) for message in messages]
        self._awaiting_completion = True
        return self.segments[-1].ids

    def prompt_length(self, messages: list[dict[str, Any]]) -> int:
        """How many tokens :meth:`prompt_ids` would return for `messages`, changing nothing
        (a context budget is checked before the prompt is committed)."""
        added = None if self._awaiting_completion else self._continuation(messages)
        if added is None:
            return len(render_prompt_ids(self.tokenizer, messages, self.tools))
        return len(self.segments[-1].ids) + len(added)

    def _continuation(self, messages: list[dict[str, Any]]) -> list[int] | None:
        """The ids `messages` add to the current segment, or None when they do not continue it
        (a new segment is rendered whole)."""
        if not self.segments or not self._continues(messages):
            return None
        # messages = seen history + the assistant turn just generated + new messages.
        new_messages = messages[len(self._seen) + 1 :]
        text = text_after_assistant_turn(self.tokenizer, new_messages, self.tools)
        completion_text = self.tokenizer.decode(
            self._last_completion, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        text = text[emitted_glue_length(self.tokenizer, completion_text, text) :]
        return encode(self.tokenizer, text)

    def add_completion(
        self, completion_ids: list[int], logprobs: list[float] | None = None
    ) -> None:
        """Append what the model generated for the last prompt (mask 1)."""
        if not self._awaiting_completion:
            raise RuntimeError("add_completion called without a prompt")
        if logprobs is not None and len(logprobs) != len(completion_ids):
            logprobs = None  # an engine that reports none or a partial list: keep lengths aligned
        self.segments[-1].extend(list(completion_ids), mask=1, logprobs=logprobs)
        self._last_completion = list(completion_ids)
        self._awaiting_completion = False

    def _continues(self, messages: list[dict[str, Any]]) -> bool:
        """Whether `messages` keep the seen history and add the generated turn as generated."""
        seen = len(self._seen)
        return (
            not self._awaiting_completion
            and len(messages) > seen
            and messages[:seen] == self._seen
            and messages[seen].get("role") == "assistant"
            and str(messages[seen].get("content") or "").strip() == self._completion_text().strip()
        )

    def _completion_text(self) -> str:
        return self.tokenizer.decode(
            self._last_completion, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )

    @property
    def prefix_consistent(self) -> bool:
        """True when the whole conversation is one segment (one training sequence)."""
        return len(self.segments) <= 1

    @property
    def response_length(self) -> int:
        """Tokens after the first prompt in the current segment (the shared response budget)."""
        return len(self.segments[-1].response_ids) if self.segments else 0
