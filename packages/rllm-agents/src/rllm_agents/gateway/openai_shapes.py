"""The OpenAI wire format as the gateway reads it: request checks and errors (the answers are
built in :mod:`~rllm_agents.gateway.openai_replies`).

Requests are checked here into plain dataclasses (:class:`ChatRequest`,
:class:`CompletionRequest`) before any engine work starts, so a request the gateway cannot
serve is refused with :class:`RequestError` - status, message and the offending ``param`` -
which the server writes as OpenAI's error object ``{"error": {"message", "type", "param",
"code"}}``. The official clients turn that into their typed exceptions
(``openai.BadRequestError``, ``AuthenticationError``, ``NotFoundError`` ...).

What is served and what is refused:

* Sampling: ``temperature``, ``top_p``, ``max_tokens`` / ``max_completion_tokens`` (the
  latter wins; more than the model's context holds is refused), ``stop`` (a string or a
  list), ``seed`` (64-bit), ``n``. Penalties, ``logit_bias``, ``response_format`` other than
  text, ``tool_choice`` other than ``auto``/``none``, ``echo``, ``suffix`` and ``best_of`` > 1
  are refused with 400: the engines cannot honour them, and a silently ignored setting would
  train on a distribution the program did not ask for.
* ``logprobs`` / ``top_logprobs``: the engines report the sampled token's log-probability
  only, so ``top_logprobs`` lists that one token (or nothing when 0).
* Messages: roles ``system``, ``developer`` (rendered as ``system``: chat templates know no
  other), ``user``, ``assistant``, ``tool``; content as a string, ``null``, or a list of text
  parts (joined). Other content parts (images, audio) are refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from rllm_agents import json_codec
from rllm_agents.engines.base import SamplingParams
from rllm_agents.gateway.json_nesting import MAX_JSON_DEPTH, deeper_than

ROLES = ("system", "developer", "user", "assistant", "tool")
# Messages with these roles and keys only need no normalising (checked cheaply). A tuple, not
# a set: a role may be any JSON value, and a list or object cannot be looked up in a set.
PLAIN_ROLES = ("system", "user", "assistant")
PLAIN_KEYS = frozenset({"role", "content", "name"})
MAX_CHOICES = 128
MAX_STOP_STRINGS = 16
MAX_TOP_LOGPROBS = 20


class RequestError(Exception):
    """A request the gateway refuses; becomes an OpenAI error answer with `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind or error_type(status)

    def body(self) -> dict[str, Any]:
        return error_body(
            self.status, self.message, param=self.param, code=self.code, kind=self.kind
        )


def error_type(status: int) -> str:
    """OpenAI's ``error.type`` for an HTTP status."""
    if status == 401:
        return "authentication_error"
    if status == 404:
        return "not_found_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def error_body(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": kind or error_type(status),
            "param": param,
            "code": code,
        }
    }


# ---- requests -------------------------------------------------------------------------------


# The engine's own defaults, but logprobs always: the recording needs them whatever the
# program asked for.
ENGINE_DEFAULTS = {**asdict(SamplingParams()), "logprobs": True}


@dataclass(frozen=True)
class SamplingRequest:
    """The sampling settings of a request, before session defaults fill the gaps."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None

    def resolve(self, defaults: SamplingRequest | None = None) -> SamplingParams:
        """Engine settings: the request's values, else the session's defaults, else the engine's."""
        merged = {**defaults.given(), **self.given()} if defaults is not None else self.given()
        return SamplingParams(**{**ENGINE_DEFAULTS, **merged})

    def given(self) -> dict[str, Any]:
        """The settings this request names (None means "not given")."""
        return {name: value for name, value in vars(self).items() if value is not None}

    def with_seed_offset(self, offset: int) -> SamplingRequest:
        """Choice `offset` of n: a seeded request gives each choice its own seed (seed +
        offset), so the n samples differ and the same request still repeats exactly."""
        if self.seed is None or offset == 0:
            return self
        return replace(self, seed=self.seed + offset)


def sampling_defaults(values: dict[str, Any] | None) -> SamplingRequest:
    """Checked session defaults, in the request's own field names (ValueError when bad)."""
    values = dict(values or {})
    known = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown sampling defaults {unknown}; choose from {sorted(known)}")
    try:
        return _sampling(values)
    except RequestError as exc:
        raise ValueError(f"sampling defaults: {exc.message}") from None


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: str  # "auto" | "none"
    sampling: SamplingRequest
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False


@dataclass(frozen=True)
class CompletionRequest:
    prompts: list[str | list[int]]  # one entry per prompt (a batch when several)
    sampling: SamplingRequest
    n: int = 1
    logprobs: int | None = None  # the completions API's number, None when not asked
    stream: bool = False
    include_usage: bool = False


def parse_json(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """The request body as an object. A body nested deeper than `max_depth` is refused before
    it is parsed (see :mod:`~rllm_agents.gateway.json_nesting`), and so is one in UTF-16 or
    UTF-32: JSON over HTTP is UTF-8, and the depth is measured on UTF-8 bytes."""
    encoding = json.detect_encoding(raw)
    if encoding not in ("utf-8", "utf-8-sig"):
        raise RequestError(400, f"the request body must be UTF-8 JSON (it looks like {encoding})")
    depth = deeper_than(raw, max_depth)
    if depth is not None:
        raise _too_deep(f"{depth} levels", max_depth)
    try:
        body = json_codec.loads(raw)
    except RecursionError:  # the scan above makes this unreachable; kept as a last guard
        raise _too_deep("too many levels", max_depth) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return body


def _too_deep(depth: str, max_depth: int) -> RequestError:
    return RequestError(
        400,
        f"the request body nests arrays and objects {depth} deep; the gateway takes at most "
        f"{max_depth}",
    )


def parse_chat(body: dict[str, Any], context_length: int | None = None) -> ChatRequest:
    """A checked chat-completions request (RequestError when it cannot be served);
    `context_length` is the model's, when known (see :func:`_max_tokens`)."""
    _refuse_unsupported(body)
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and tool_choice not in ("auto", "none"):
        raise RequestError(
            400,
            "tool_choice: only 'auto' and 'none' are supported (the engines cannot force a call)",
            param="tool_choice",
            code="unsupported_value",
        )
    logprobs = _optional(body, "logprobs", bool) or False
    top_logprobs = _int_in(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    if top_logprobs and not logprobs:
        raise RequestError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    return ChatRequest(
        messages=_messages(body.get("messages")),
        tools=_tools(body.get("tools")),
        tool_choice=tool_choice or "auto",
        sampling=_sampling(body, context_length),
        n=_int_in(body, "n", 1, MAX_CHOICES) or 1,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        stream=_optional(body, "stream", bool) or False,
        include_usage=_include_usage(body),
    )


def parse_completion(body: dict[str, Any], context_length: int | None = None) -> CompletionRequest:
    """A checked completions request: a text or token-id prompt, or a list of them."""
    _refuse_unsupported(body)
    if body.get("echo"):
        raise RequestError(400, "echo is not supported", param="echo", code="unsupported_value")
    if body.get("suffix"):
        raise RequestError(400, "suffix is not supported", param="suffix", code="unsupported_value")
    n = _int_in(body, "n", 1, MAX_CHOICES) or 1
    best_of = _int_in(body, "best_of", 1, MAX_CHOICES)
    if best_of is not None and best_of != n:
        raise RequestError(
            400, "best_of other than n is not supported", param="best_of", code="unsupported_value"
        )
    return CompletionRequest(
        prompts=_prompts(body.get("prompt")),
        sampling=_sampling(body, context_length),
        n=n,
        logprobs=_int_in(body, "logprobs", 0, MAX_TOP_LOGPROBS),
        stream=_optional(body, "stream", bool) or False,
        include_usage=_include_usage(body),
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name in ("frequency_penalty", "presence_penalty"):
        if body.get(name) not in (None, 0, 0.0):
            raise RequestError(
                400, f"{name} is not supported (only 0)", param=name, code="unsupported_value"
            )
    if body.get("logit_bias"):
        raise RequestError(
            400, "logit_bias is not supported", param="logit_bias", code="unsupported_value"
        )
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict) or response_format.get("type") != "text"
    ):
        raise RequestError(
            400,
            "response_format: only {'type': 'text'} is supported",
            param="response_format",
            code="unsupported_value",
        )


def _sampling(body: dict[str, Any], context_length: int | None = None) -> SamplingRequest:
    temperature = _number_in(body, "temperature", 0.0, 2.0)
    top_p = _number_in(body, "top_p", 0.0, 1.0)
    if top_p is not None and top_p == 0:
        raise RequestError(400, "top_p must be greater than 0", param="top_p")
    return SamplingRequest(
        temperature=temperature,
        top_p=top_p,
        max_tokens=_max_tokens(body, context_length),
        stop=_stop(body.get("stop")),
        # OpenAI's range; the engines seed 64-bit generators with it.
        seed=_int_in(body, "seed", -(2**63), 2**63 - 1),
    )


def _max_tokens(body: dict[str, Any], context_length: int | None) -> int | None:
    """``max_completion_tokens``, else ``max_tokens``. More than the model's whole context
    holds is refused, as OpenAI refuses it, rather than cut to fit: no prompt leaves room for
    it, so the program asked for something impossible and should hear so. A value that fits
    the context but not beside this prompt is served; the completion stops at the context's
    end with finish_reason "length", as it would at max_tokens."""
    name = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )
    value = _int_in(body, name, 1, None)
    if value is not None and context_length is not None and value > context_length:
        raise RequestError(
            400,
            f"{name} is {value}, but the model's context holds at most {context_length} "
            "tokens (prompt and completion together)",
            param=name,
        )
    return value


def _stop(stop: Any) -> tuple[str, ...] | None:
    if stop is None:
        return None
    if isinstance(stop, str):
        stop = [stop]
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOP_STRINGS
        or not all(isinstance(s, str) and s for s in stop)
    ):
        raise RequestError(
            400,
            f"stop must be a non-empty string or a list of at most {MAX_STOP_STRINGS} of them",
            param="stop",
        )
    return tuple(stop)


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise RequestError(400, "stream_options must be an object", param="stream_options")
    return bool(options.get("include_usage"))


def _optional(body: dict[str, Any], name: str, kind: type) -> Any:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise RequestError(400, f"{name} must be a {kind.__name__}", param=name)
    return value


def _number_in(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(400, f"{name} must be a number", param=name)
    if not low <= value <= high:
        raise RequestError(400, f"{name} must be between {low:g} and {high:g}", param=name)
    return float(value)


def _int_in(body: dict[str, Any], name: str, low: int, high: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"{name} must be an integer", param=name)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise RequestError(400, f"{name} must be {bound}", param=name)
    return value


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages: expected a non-empty list of messages", param="messages")
    return [_message(message, index) for index, message in enumerate(messages)]


def _message(message: Any, index: int) -> dict[str, Any]:
    if (
        type(message) is dict
        and message.keys() <= PLAIN_KEYS
        and message.get("role") in PLAIN_ROLES
        and type(message.get("content")) is str
        and None not in message.values()
    ):
        return message  # already what templates take (the common case, kept cheap)
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise RequestError(400, f"{param}: expected an object", param=param)
    role = message.get("role")
    if role not in ROLES:
        raise RequestError(
            400, f"{param}.role: expected one of {', '.join(ROLES)}, got {role!r}", param=param
        )
    normal = {key: value for key, value in message.items() if value is not None}
    # Chat templates concatenate content as a string and know only these roles.
    normal["role"] = "system" if role == "developer" else role
    normal["content"] = _content(message.get("content"), f"{param}.content")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and (role != "assistant" or not isinstance(tool_calls, list)):
        raise RequestError(
            400, f"{param}.tool_calls: only assistant messages carry a list of them", param=param
        )
    return normal


def _content(content: Any, param: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(
                    400,
                    f"{param}: only text content parts are supported, got {kind!r}",
                    param=param,
                    code="unsupported_value",
                )
            texts.append(str(part.get("text") or ""))
        return "".join(texts)
    raise RequestError(400, f"{param}: expected a string or a list of text parts", param=param)


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError(400, "tools: expected a list of function tools", param="tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(function, dict)
            or tool.get("type", "function") != "function"
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise RequestError(
                400,
                f"tools[{index}]: expected {{'type': 'function', 'function': {{'name': ...}}}}",
                param=f"tools[{index}]",
            )
    return tools or None


def _prompts(prompt: Any) -> list[str | list[int]]:
    def is_ids(value: Any) -> bool:
        return (
            isinstance(value, list)
            and bool(value)
            and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
        )

    if isinstance(prompt, str) and prompt:
        return [prompt]
    if is_ids(prompt):
        return [list(prompt)]
    if (
        isinstance(prompt, list)
        and prompt
        and all((isinstance(p, str) and p) or is_ids(p) for p in prompt)
    ):
        return [p if isinstance(p, str) else list(p) for p in prompt]
    raise RequestError(
        400,
        "prompt: expected a non-empty string, a list of token ids, or a list of either",
        param="prompt",
    )
