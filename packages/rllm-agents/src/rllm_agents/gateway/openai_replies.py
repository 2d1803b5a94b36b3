"""The OpenAI wire format's answers as the gateway writes them: whole completions, stream
chunks, usage, log-probs and the model list, built from the engine's outputs (:class:`Choice`)
for a request already checked by :mod:`~rllm_agents.gateway.openai_shapes`.

Each choice carries two extensions read by token-aware clients: its ``token_ids`` and the
``prompt_token_ids`` the engine saw (vLLM's names). Plain clients ignore them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.engines.base import ModelOutput
from rllm_agents.gateway.openai_shapes import ChatRequest, CompletionRequest


@dataclass(frozen=True)
class Choice:
    """One generated choice as the client gets it (tool calls parsed, text cleaned)."""

    output: ModelOutput
    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    token_texts: list[str] | None = None  # per completion token, when logprobs are asked


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def total_usage(choices: list[Choice], n: int) -> dict[str, int]:
    """Token counts of an answer whose choices come n per prompt: each prompt counts once."""
    prompt_tokens = sum(choice.output.prompt_length for choice in choices[::n])
    return usage(prompt_tokens, sum(choice.output.completion_length for choice in choices))


def chat_logprobs(choice: Choice, top_logprobs: int) -> dict[str, Any]:
    content = []
    for text, logprob in zip(choice.token_texts or [], choice.output.logprobs, strict=False):
        entry = {"token": text, "logprob": logprob, "bytes": list(text.encode())}
        entry["top_logprobs"] = [dict(entry)] if top_logprobs else []
        content.append(entry)
    return {"content": content, "refusal": None}


def chat_message(choice: Choice) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": choice.content, "refusal": None}
    if choice.tool_calls:
        message["tool_calls"] = choice.tool_calls
    if choice.output.reasoning is not None:
        message["reasoning_content"] = choice.output.reasoning
    return message


def envelope(kind: str, request_id: str, model: str) -> dict[str, Any]:
    """The fields every answer and chunk starts with."""
    return {"id": request_id, "object": kind, "created": int(time.time()), "model": model}


def chat_completion(
    request_id: str, model: str, request: ChatRequest, choices: list[Choice]
) -> dict[str, Any]:
    return {
        **envelope("chat.completion", request_id, model),
        "choices": [
            {
                "index": index,
                "message": chat_message(choice),
                "logprobs": chat_logprobs(choice, request.top_logprobs)
                if request.logprobs
                else None,
                "finish_reason": choice.finish_reason,
                "token_ids": choice.output.completion_ids,
                "prompt_token_ids": choice.output.prompt_ids,
            }
            for index, choice in enumerate(choices)
        ],
        "usage": total_usage(choices, request.n),
    }


def chat_chunks(
    request_id: str, model: str, request: ChatRequest, choices: list[Choice]
) -> list[dict[str, Any]]:
    """The streamed form of a finished answer: per choice a role, content, tool-call and
    finish chunk; then the usage chunk when ``stream_options.include_usage`` asked for it.

    The engines return whole completions, so each choice's content arrives as one delta.
    """
    head = envelope("chat.completion.chunk", request_id, model)

    def chunk(index: int, delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None, **extra}
        return {**head, "choices": [choice]}

    chunks = []
    for index, choice in enumerate(choices):
        logprobs = chat_logprobs(choice, request.top_logprobs) if request.logprobs else None
        chunks.append(chunk(index, {"role": "assistant", "content": ""}))
        if choice.content:
            chunks.append(chunk(index, {"content": choice.content}, logprobs=logprobs))
            logprobs = None
        if choice.tool_calls:
            calls = [{"index": k, **call} for k, call in enumerate(choice.tool_calls)]
            chunks.append(chunk(index, {"tool_calls": calls}))
        chunks.append(
            chunk(
                index,
                {},
                logprobs=logprobs,  # here when no content chunk carried them
                finish_reason=choice.finish_reason,
                token_ids=choice.output.completion_ids,
            )
        )
    if request.include_usage:
        chunks.append({**head, "choices": [], "usage": total_usage(choices, request.n)})
    return chunks


def completion_logprobs(choice: Choice) -> dict[str, Any]:
    texts = choice.token_texts or []
    offsets, position = [], 0
    for text in texts:
        offsets.append(position)
        position += len(text)
    return {
        "tokens": texts,
        "token_logprobs": choice.output.logprobs,
        "top_logprobs": [
            {text: lp} for text, lp in zip(texts, choice.output.logprobs, strict=False)
        ],
        "text_offset": offsets,
    }


def completion_choice(index: int, choice: Choice, request: CompletionRequest) -> dict[str, Any]:
    return {
        "index": index,
        "text": choice.content or "",
        "logprobs": completion_logprobs(choice) if request.logprobs is not None else None,
        "finish_reason": choice.finish_reason,
        "token_ids": choice.output.completion_ids,
        "prompt_token_ids": choice.output.prompt_ids,
    }


def text_completion(
    request_id: str, model: str, request: CompletionRequest, choices: list[Choice]
) -> dict[str, Any]:
    return {
        **envelope("text_completion", request_id, model),
        "choices": [completion_choice(i, c, request) for i, c in enumerate(choices)],
        "usage": total_usage(choices, request.n),
    }


def completion_chunks(
    request_id: str, model: str, request: CompletionRequest, choices: list[Choice]
) -> list[dict[str, Any]]:
    """The streamed form of a finished text completion (one chunk per choice)."""
    answer = text_completion(request_id, model, request, choices)
    chunks = [{**answer, "choices": [choice]} for choice in answer["choices"]]
    for chunk in chunks:
        chunk.pop("usage")
    if request.include_usage:
        chunks.append({**answer, "choices": []})
    return chunks


def models_list(model: str) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": model, "object": "model", "created": 0, "owned_by": "rllm"}],
    }
