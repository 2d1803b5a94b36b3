"""An OpenAI-compatible gateway in front of a rollout engine that records every token.

Any agent program written against the OpenAI API - the ``openai`` package, a framework, a
command-line tool - can be evaluated and trained unmodified: hand it a session's ``base_url``,
and every call it makes is recorded with the exact token ids and log-probs the engine saw and
produced. :func:`build_sequences` turns a session's calls into token-exact training sequences.

* :mod:`~rllm_agents.gateway.server` - :class:`Gateway`, the aiohttp server;
* :mod:`~rllm_agents.gateway.processes` - :class:`GatewayProcesses`, sessions spread over
  several serving processes (for an engine that is a remote server's client);
* :mod:`~rllm_agents.gateway.sessions` - :class:`GatewaySession`, :class:`RecordedCall`;
* :mod:`~rllm_agents.gateway.prompts` - prompt ids that keep the model's own earlier tokens;
* :mod:`~rllm_agents.gateway.trajectories` - :func:`build_sequences`, :class:`SequenceReport`;
* :mod:`~rllm_agents.gateway.openai_shapes` / :mod:`~rllm_agents.gateway.answers` - the wire
  format: request checks, answers, streaming chunks, errors.

docs/agents/gateway-protocol.md describes the endpoints, session URLs, the recording and the
merge and split rules.
"""

from rllm_agents.gateway.processes import GatewayProcesses
from rllm_agents.gateway.server import SESSION_HEADER, Gateway
from rllm_agents.gateway.sessions import NO_KEY, GatewaySession, RecordedCall
from rllm_agents.gateway.trajectories import SequenceReport, SplitNote, build_sequences

__all__ = [
    "NO_KEY",
    "SESSION_HEADER",
    "Gateway",
    "GatewayProcesses",
    "GatewaySession",
    "RecordedCall",
    "SequenceReport",
    "SplitNote",
    "build_sequences",
]
