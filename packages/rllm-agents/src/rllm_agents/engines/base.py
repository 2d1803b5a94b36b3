"""The one async interface every rollout engine implements.

Messages (OpenAI chat format) or token ids go in; text, token ids, logprobs and a finish reason
come out. Engines that cannot report tokens (a plain chat API) leave the token fields empty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = True
    # The OpenAI request's ``response_format`` as JSON text (a string keeps this hashable),
    # e.g. ``{"type": "json_object", "schema": {...}}``: servers that constrain decoding to it
    # (llama.cpp's grammar, vLLM's guided decoding) make the reply follow it. Sent by the
    # OpenAI-compatible engines; in-process engines (transformers, vLLM) ignore it, so a
    # caller must still check what comes back (rewards.judge does).
    response_format: str | None = None

    def request_fields(self) -> dict[str, Any]:
        """These settings under their OpenAI request names (stop, seed and response_format
        only when set)."""
        fields: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if self.stop:
            fields["stop"] = list(self.stop)
        if self.seed is not None:
            fields["seed"] = self.seed
        if self.response_format is not None:
            fields["response_format"] = json.loads(self.response_format)
        return fields


@dataclass
class ModelOutput:
    text: str
    finish_reason: str = "stop"  # "stop" | "length" | "tool_calls" | ...
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # one per completion token
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: str | None = None
    # Seconds the request waited for a free serving slot before it was sent (engines that
    # limit how many requests reach their server at once; see engines.slots). Not part of
    # the engine's generation timeout.
    queue_time: float = 0.0
    # The server's own token counts ("prompt_tokens", "completion_tokens"), when it reports
    # them: the only count there is from a chat server that returns neither ids nor logprobs.
    usage: dict[str, int] = field(default_factory=dict)
    policy_version: int | None = None  # the weights' version that generated it (weight_sync)

    @property
    def prompt_length(self) -> int:
        return len(self.prompt_ids)

    @property
    def completion_length(self) -> int:
        return len(self.completion_ids)


class EngineError(RuntimeError):
    """The engine failed in a way retries did not fix (the execution engine records it)."""


class PromptRejected(EngineError):
    """The engine refused this request itself (malformed, or a model server's 4xx answer).

    The caller's input is at fault, so retrying the same request cannot help; a gateway
    answers it as the client's error (HTTP 400), not as a server failure.
    """


class ContextOverflow(PromptRejected):
    """The prompt does not fit the model's context window."""


@runtime_checkable
class RolloutEngine(Protocol):
    """What every engine implements. An engine that serves a fixed number of requests at once
    also says so in an optional ``serving_slots`` attribute (``engines.slots.serving_slots``
    reads it), holds further requests back itself, and reports their wait as
    ``ModelOutput.queue_time``."""

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams = SamplingParams(),
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        """Generate one completion for `messages` (rendered by the engine) or raw `prompt_ids`."""
        ...

    async def aclose(self) -> None:
        """Release servers, threads and memory the engine holds."""
        ...
