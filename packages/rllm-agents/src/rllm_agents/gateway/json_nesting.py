"""How deep a JSON text nests, measured on its bytes before any parser sees it.

The parsers recurse once per level: the stdlib's raises ``RecursionError`` past about a
thousand levels (orjson refuses past 1024 and hands the text to it), and a body that parses
can still break a later recursive walk of it (a chat template's ``tojson``, a recording's
encoder). So the gateway measures the depth first and refuses a body nested deeper than any
request needs.

The measure is a few passes over the bytes in C (a Python step per bracket outside strings,
none per byte). A body with no more opening brackets than the limit cannot nest deeper, and
most bodies stop there, after one pass. Otherwise: escaped backslashes and quotes are
deleted, so every quote left opens or closes a string; every byte but brackets and quotes is
deleted; the pieces between quotes are alternately outside and inside strings, and the
outside ones are kept (brackets in strings are text); the running sum of +1 per opening and
-1 per closing bracket peaks at the depth.

On the 2-core development machine under load that took about 0.6 ms for a 66 kB body of 100
messages full of escaped code (orjson parses it in 0.09 ms); 0.05 ms for the first pass alone.
"""

from __future__ import annotations

from itertools import accumulate

# Deeper than the deepest real request (a tool's JSON schema nests a few levels per object),
# far below where Python's recursion limit starts to matter.
MAX_JSON_DEPTH = 128

_BRACKETS = b"[]{}"
_NOT_BRACKETS_OR_QUOTES = bytes(sorted(set(range(256)) - set(_BRACKETS + b'"')))
_NOT_OPENINGS = bytes(sorted(set(range(256)) - set(b"[{")))
# Openings become 1 and closings 255, which is -1 read as a signed byte.
_STEPS = bytes.maketrans(_BRACKETS, b"\x01\xff\x01\xff")
# Brackets summed per piece, so a body that is deep early is refused without summing the rest.
_PIECE = 1 << 16


def nesting_depth(raw: bytes, stop_above: int | None = None) -> int:
    """How deep arrays and objects nest in the JSON text `raw` (0 for a scalar); once the
    depth is past `stop_above`, the depth so far.

    Exact for UTF-8 JSON. For text that is not JSON it is an estimate (an unclosed string
    counts as structure), which is all a check ahead of a parser that refuses it needs.
    """
    # Escaped backslashes first: of three backslashes before a quote, the first two are one
    # escaped backslash and the third escapes the quote.
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    pieces = unescaped.translate(None, _NOT_BRACKETS_OR_QUOTES).split(b'"')
    steps = memoryview(b"".join(pieces[::2]).translate(_STEPS)).cast("b")
    level = depth = 0
    for start in range(0, len(steps), _PIECE):
        levels = list(accumulate(steps[start : start + _PIECE], initial=level))
        depth, level = max(depth, max(levels)), levels[-1]
        if stop_above is not None and depth > stop_above:
            break
    return depth


def deeper_than(raw: bytes, limit: int) -> int | None:
    """The nesting depth of `raw` (or as far as it was measured) when it is over `limit`,
    else None. A text with at most `limit` opening brackets cannot nest deeper, so a body with
    few of them (most bodies) costs one pass."""
    if len(raw.translate(None, _NOT_OPENINGS)) <= limit:
        return None
    depth = nesting_depth(raw, stop_above=limit)
    return depth if depth > limit else None
