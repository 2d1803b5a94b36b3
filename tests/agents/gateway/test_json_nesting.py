"""The byte-level depth measure agrees with the parsed value's depth, whatever the strings hold."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rllm_agents.gateway.json_nesting import deeper_than, nesting_depth

# Strings made of what could fool a byte scan: brackets, quotes, backslashes, escapes.
tricky_text = st.text(st.sampled_from('[]{}"\\/\n\t\x00é😀ab'), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=30,
)


def parsed_depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(parsed_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(parsed_depth, value), default=0)
    return 0


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(value=json_values, ascii_only=st.booleans())
def test_the_measured_depth_is_the_parsed_depth(value, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert nesting_depth(raw) == parsed_depth(value)


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (b"1", 0),
        (b'"[[["', 0),
        (b'["\\\\"]', 1),  # an escaped backslash, then the closing quote
        (b'["\\\\\\"[["]', 1),  # an escaped backslash, then an escaped quote: still a string
        (b'{"a": [{"b": []}]}', 4),
        (b"[" * 5, 5),  # unclosed: counted as far as it goes
    ],
)
def test_known_depths(raw, depth):
    assert nesting_depth(raw) == depth


def test_a_deep_body_is_told_from_its_first_piece():
    body = b"[" * 10_000_000
    assert deeper_than(body, 128) == 65_536  # measured one piece far, not to the end
    assert deeper_than(b"[" * 128, 128) is None and deeper_than(b"[" * 129, 128) == 129
