"""Sessions: what the gateway records per program run, call by call.

A :class:`GatewaySession` is one program's view of the gateway: its own ``base_url`` (the
gateway's URL with ``/sessions/<id>`` in front of ``/v1``) and the :class:`RecordedCall` of
every call made under it. A call of ``n`` choices is recorded as ``n`` RecordedCalls that
share ``index`` and differ in ``choice_index``.

``index`` is given when the request arrives, so ``calls`` lists calls in arrival order even
when concurrent calls finish in another order. Failed calls are not recorded (the program got
an error and no tokens); ``failed_calls`` counts them.

The session also keeps, per recorded call, the text and token ids the model was left with
(its prompt followed by its completion). :mod:`rllm_agents.gateway.prompts` reuses those ids
when the next prompt's rendered text continues one of them, so that the model's own tokens,
not a re-tokenisation of its text, stand in the next prompt.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.gateway.openai_shapes import SamplingRequest

# The key sessions hand out when the gateway checks none: the official clients insist on one.
NO_KEY = "rllm-no-key"


@dataclass
class RecordedCall:
    """One choice of one call, as the engine saw and produced it."""

    index: int  # the call's position in its session (arrival order)
    messages: list[dict[str, Any]] | None  # as rendered (None for /v1/completions)
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]  # exactly what the engine was given
    completion_ids: list[int]  # exactly what it generated (EOS / stop tokens included)
    logprobs: list[float]  # one per completion id (empty when the engine reports none)
    text: str  # the completion text as the engine returned it
    tool_calls: list[dict[str, Any]]  # OpenAI-shaped, as the client got them
    finish_reason: str
    sampling: dict[str, Any]  # the engine's SamplingParams, as a dict
    started: float  # time.time() when the call arrived
    latency_s: float  # arrival to answer ready
    choice_index: int = 0  # which of the call's n choices
    endpoint: str = "chat"  # "chat" | "completions"
    extends: int | None = None  # index of the call whose prompt + completion this prompt reused

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class ModelContext:
    """What the model was left with after one recorded call: prompt then completion."""

    call_index: int
    text: str
    ids: list[int]


@dataclass
class GatewaySession:
    """One program's recorded calls; made by :meth:`Gateway.open_session`."""

    id: str
    base_url: str
    api_key: str
    sampling_defaults: SamplingRequest = field(default_factory=SamplingRequest)
    failed_calls: int = 0
    _calls: list[RecordedCall] = field(default_factory=list, repr=False)
    _contexts: list[ModelContext] = field(default_factory=list, repr=False)
    _next_index: int = field(default=0, repr=False)
    closed: bool = False

    @property
    def calls(self) -> list[RecordedCall]:
        """Every recorded call so far, in arrival order (choices of one call in order)."""
        return sorted(self._calls, key=lambda call: (call.index, call.choice_index))

    @property
    def contexts(self) -> list[ModelContext]:
        return list(self._contexts)

    def next_index(self) -> int:
        index, self._next_index = self._next_index, self._next_index + 1
        return index

    def record(self, call: RecordedCall, context: ModelContext | None) -> None:
        if self.closed:
            return  # closed while the call ran: the trainer has already taken the calls
        self._calls.append(call)
        if context is not None:
            self._contexts.append(context)

    def close(self) -> list[RecordedCall]:
        calls = self.calls
        self.closed = True
        self._calls, self._contexts = [], []
        return calls


def check_session_id(session_id: str) -> str:
    """`session_id` when it can stand in a URL path as it is; ValueError otherwise."""
    if not session_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"session id {session_id!r}: use letters, digits, '-', '_', '.'")
    return session_id


def http_root(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class SessionHost:
    """What both gateways share, the one-process :class:`~rllm_agents.gateway.Gateway` and
    :class:`~rllm_agents.gateway.GatewayProcesses`: ``async with`` starts and stops one, and
    a session opened on it gets a checked, unused id and its own URL under the server's root.
    A subclass keeps its open sessions in ``_sessions`` (id -> whatever it needs)."""

    _sessions: dict[str, Any]

    async def start(self) -> Any:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Any:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def open_sessions(self) -> list[str]:
        return list(self._sessions)

    def _session_id(self, session_id: str | None) -> str:
        """`session_id` (a fresh one when None), checked and not open yet."""
        session_id = check_session_id(session_id or uuid.uuid4().hex)
        if session_id in self._sessions:
            raise ValueError(f"session {session_id!r} is already open")
        return session_id

    @staticmethod
    def _new_session(
        session_id: str, root: str, api_key: str | None, defaults: SamplingRequest
    ) -> GatewaySession:
        """The session `session_id` served from `root` (``http://host:port``)."""
        return GatewaySession(
            id=session_id,
            base_url=f"{root}/sessions/{session_id}/v1",
            api_key=api_key or NO_KEY,
            sampling_defaults=defaults,
        )
