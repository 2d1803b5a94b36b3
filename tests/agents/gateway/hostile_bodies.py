"""Request bodies a hostile or broken client may send the gateway, drawn from a seeded generator.

Each :class:`Probe` is one HTTP request: an endpoint, the raw body bytes, and whether a
correct gateway must serve it (``valid``: 200) or may refuse it (any 4xx). No probe may get a
5xx. :func:`hostile_probes` mixes the families of :data:`FAMILIES` with the systematic ones
(:func:`wrong_type_probes`: every field of a few full requests, set to every wrong kind of
value), so each run sends the same bodies and a failure reproduces.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

CHAT = "/chat/completions"
COMPLETIONS = "/completions"

USER = {"role": "user", "content": "hi"}
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}
TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}

# Full requests: every field the gateway reads appears in one of them, so replacing each
# node of their JSON trees reaches every check.
FULL_REQUESTS: list[tuple[str, dict[str, Any]]] = [
    (
        CHAT,
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be terse.", "name": "rules"},
                {"role": "user", "content": [{"type": "text", "text": "Look up 'cat'."}]},
                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                {"role": "tool", "content": "a small animal", "tool_call_id": "call_1"},
            ],
            "tools": [TOOL],
            "tool_choice": "auto",
            "max_tokens": 4,
            "temperature": 0.5,
            "top_p": 0.9,
            "stop": ["\n\n"],
            "seed": 1,
        },
    ),
    (
        CHAT,
        {
            "messages": [{"role": "developer", "content": "Answer."}, USER],
            "n": 2,
            "logprobs": True,
            "top_logprobs": 1,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_completion_tokens": 3,
            "frequency_penalty": 0,
            "presence_penalty": 0,
            "response_format": {"type": "text"},
        },
    ),
    (COMPLETIONS, {"model": "m", "prompt": "Once upon", "max_tokens": 3, "logprobs": 1, "n": 1}),
    (COMPLETIONS, {"prompt": ["a", [1, 2, 3]], "best_of": 1, "echo": False, "stream": True}),
]

# Every kind of JSON value a field may wrongly hold: wrong types, empty and huge values,
# integers past 64 bits, odd strings.
WRONG_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2**63,
    -(2**63) - 1,
    10**30,
    1.5,
    -0.0,
    1e308,
    "",
    "x",
    "\ud800",  # a lone surrogate (JSON text may escape one; UTF-8 cannot hold it)
    "\x00",
    "\u202e\u200d\ufeff",  # right-to-left override, zero-width joiner, byte-order mark
    [],
    [None],
    [[[]]],
    {},
    {"type": 1},
    {"role": "user", "content": {"nested": ["content"]}},
]

# Number tokens that only raw JSON text can carry (json.dumps would write neither).
RAW_NUMBERS = [
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    "-Infinity",
    "1" + "0" * 5000,  # past Python's digit limit for int()
    "123456789012345678901234567890",
    "1.0e-400",
    "-0",
    "0.1e999999999",
]
NUMERIC_FIELDS = ["max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "seed"]
NUMERIC_FIELDS += ["top_logprobs", "logprobs", "best_of", "frequency_penalty"]

# Strings that look like JSON structure or break naive scanners, inside a valid request.
BRACKET_STRINGS = ["[" * 5000, "{" * 300 + "}" * 10, '\\"[[[', '"]]]}}}', "[\\]" * 200]

DEPTHS = [2, 100, 127, 128, 129, 1000, 1025, 5000, 100_000]


@dataclass(frozen=True)
class Probe:
    """One request to send: `path` under the gateway's ``/v1``, the raw `body`."""

    family: str
    path: str
    body: bytes
    valid: bool = False  # a correct gateway answers 200

    def describe(self) -> str:
        shown = self.body[:160]
        more = f" ... ({len(self.body)} bytes)" if len(self.body) > 160 else ""
        return f"{self.family} {self.path} {shown!r}{more}"


def dumps(body: Any) -> bytes:
    """JSON text of `body` as a client library writes it (escapes keep lone surrogates)."""
    return json.dumps(body).encode()


def json_paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every node's path in a JSON tree (keys and list indices), the root's excepted."""
    if not isinstance(value, (dict, list)):
        return
    for key, child in value.items() if isinstance(value, dict) else enumerate(value):
        yield (*prefix, key)
        yield from json_paths(child, (*prefix, key))


def replaced(body: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


def wrong_type_probes() -> Iterator[Probe]:
    """Each node of each full request replaced by each wrong value, and each full request
    with each field removed."""
    for path, body in FULL_REQUESTS:
        yield Probe("full", path, dumps(body), valid=True)
        for where in json_paths(body):
            for value in WRONG_VALUES:
                yield Probe("wrong type", path, dumps(replaced(body, where, value)))
        for field in body:
            yield Probe("missing field", path, dumps({k: v for k, v in body.items() if k != field}))


def raw_number_probes() -> Iterator[Probe]:
    for path, body in FULL_REQUESTS:
        for field in NUMERIC_FIELDS:
            for number in RAW_NUMBERS:
                text = dumps({**body, field: "__number__"}).replace(
                    b'"__number__"', number.encode()
                )
                yield Probe("raw number", path, text)


def nesting_probes() -> Iterator[Probe]:
    """Deep arrays and objects: bare, closed, and inside a field; and brackets inside strings,
    which are text, not nesting (those requests are valid)."""
    for depth in DEPTHS:
        yield Probe("deep", CHAT, b"[" * depth)
        yield Probe("deep", CHAT, b"[" * depth + b"]" * depth)
        yield Probe("deep", CHAT, b'{"a":' * depth + b"1" + b"}" * depth)
        yield Probe("deep", CHAT, b'{"messages":' + b"[" * depth + b"]" * depth + b"}")
        yield Probe("deep", COMPLETIONS, b'{"prompt":' + b"[{" * depth)
        inner = b'{"type":"object","properties":{"x":' * depth + b"{}" + b"}}" * depth
        tool = b'{"type":"function","function":{"name":"f","parameters":' + inner + b"}}"
        yield Probe(
            "deep", CHAT, b'{"messages":[{"role":"user","content":"hi"}],"tools":[' + tool + b"]}"
        )
    for text in BRACKET_STRINGS:
        chat = {"messages": [{"role": "user", "content": text}], "max_tokens": 2}
        yield Probe("brackets in strings", CHAT, dumps(chat), valid=True)
        yield Probe("brackets in strings", COMPLETIONS, dumps({"prompt": text}), valid=True)


def _random_bytes(rng: random.Random) -> Probe:
    return Probe(
        "random bytes", rng.choice([CHAT, COMPLETIONS]), rng.randbytes(rng.randint(0, 300))
    )


def _json_alphabet(rng: random.Random) -> Probe:
    text = "".join(rng.choices('[]{}",:0123456789.eE-+ truefalsnul\\', k=rng.randint(1, 200)))
    return Probe("json alphabet", rng.choice([CHAT, COMPLETIONS]), text.encode())


def _truncated(rng: random.Random) -> Probe:
    path, body = rng.choice(FULL_REQUESTS)
    text = dumps(body)
    cut = text[: rng.randrange(len(text))]
    return Probe("truncated", path, cut + rng.choice([b"", b"\x00", b"\xff", b"}", b"]"]))


def _spliced(rng: random.Random) -> Probe:
    """A full request with random bytes written over a random stretch."""
    path, body = rng.choice(FULL_REQUESTS)
    text = bytearray(dumps(body))
    start = rng.randrange(len(text))
    text[start : start + rng.randint(1, 8)] = rng.randbytes(rng.randint(0, 8))
    return Probe("spliced", path, bytes(text))


def _unicode(rng: random.Random) -> Probe:
    """Odd text in the content: escapes of lone or reversed surrogates, raw invalid UTF-8,
    overlong encodings, control characters, combining marks, the highest code points."""
    odd = rng.choice(
        [
            b"\\ud800",
            b"\\udc00\\ud800",
            b"\\u0000",
            b"\xff\xfe",
            b"\xc0\xaf",
            b"\xed\xa0\x80",
            b"\x01\x1f",
            "e\u0301\u0301\u0301".encode() * 300,
            "\U0010ffff\uffff\ufffe".encode(),
            "\u202e\u2066".encode(),
            "👩‍👩‍👧‍👦".encode(),
        ]
    )
    path = rng.choice([CHAT, COMPLETIONS])
    if path == CHAT:
        body = b'{"messages":[{"role":"user","content":"a' + odd + b'b"}],"max_tokens":2}'
    else:
        body = b'{"prompt":"a' + odd + b'b","max_tokens":2}'
    return Probe("unicode", path, body)


def _encoded(rng: random.Random) -> Probe:
    """A valid request in another encoding or with a byte-order mark in front."""
    path, body = rng.choice(FULL_REQUESTS)
    text = json.dumps(body)
    encoded = rng.choice(
        [
            b"\xef\xbb\xbf" + text.encode(),
            text.encode("utf-16"),
            text.encode("utf-16-le"),
            text.encode("utf-32"),
            text.encode("latin-1", "replace"),
        ]
    )
    return Probe("encoding", path, encoded)


def _valid(rng: random.Random) -> Probe:
    """A request a correct gateway serves, with random values in the fields' ranges."""
    chat = rng.random() < 0.6
    body: dict[str, Any] = {
        "max_tokens": rng.randint(1, 8192),
        "temperature": rng.uniform(0, 2),
        "top_p": rng.uniform(0.01, 1),
        "n": rng.randint(1, 3),
        "seed": rng.randint(-(2**63), 2**63 - 1 - 3),
        "stream": rng.random() < 0.3,
    }
    if chat:
        content = "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(1, 40)))
        body["messages"] = [{"role": "user", "content": content}]
        if rng.random() < 0.3:
            body["tools"] = [TOOL]
        return Probe("valid", CHAT, dumps(body), valid=True)
    body["prompt"] = rng.choice(["Once", [1, 2, 3], ["a", "b"]])
    return Probe("valid", COMPLETIONS, dumps(body), valid=True)


# Families drawn at random, with their weights.
FAMILIES: dict[Callable[[random.Random], Probe], int] = {
    _random_bytes: 3,
    _json_alphabet: 3,
    _truncated: 4,
    _spliced: 4,
    _unicode: 3,
    _encoded: 1,
    _valid: 2,
}


def hostile_probes(seed: int, drawn: int) -> list[Probe]:
    """The systematic probes, then `drawn` from the random families (seeded)."""
    rng = random.Random(seed)
    makers = rng.choices(list(FAMILIES), weights=list(FAMILIES.values()), k=drawn)
    systematic = [*wrong_type_probes(), *raw_number_probes(), *nesting_probes()]
    return systematic + [make(rng) for make in makers]
