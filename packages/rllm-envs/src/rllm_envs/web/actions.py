"""The web action grammar and its tolerant parser (pure functions, no browser).

A reply may hold prose, reasoning and code fences; the *last* call of a known verb is the
action. Arguments are quoted strings (``"..."`` or ``'...'``, backslash escapes allowed) or
bare words; element refs are written ``e12`` (``ref=e12`` and ``[ref=e12]`` are accepted too).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

GRAMMAR = (
    "Actions (write exactly one; the last one in your reply counts):\n"
    "  click(ref)              click the element, e.g. click(e12)\n"
    '  fill(ref, "text")       type text into a text box, replacing what is there\n'
    '  select(ref, "option")   choose an option of a drop-down list\n'
    '  press("Enter")          press a key (Enter, Tab, Escape, ArrowDown, Backspace, ...)\n'
    '  scroll("down")          scroll the page ("up" or "down")\n'
    "  goto(url)               open a URL (a path such as /login is relative to this site)\n"
    "  back()                  go back to the previous page\n"
    '  answer("text")          give your final answer and end the episode\n'
    "Refs are the [ref=eN] labels of the page snapshot."
)

VERBS = ("click", "fill", "select", "press", "scroll", "goto", "back", "answer")
# A verb followed by "(": the candidate starts. Word boundary so "reclick(" does not count.
_CALL = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(VERBS) + r")\s*\(")
_THINK_END = "</think>"
_REF = re.compile(r"^\[?(?:ref\s*=\s*)?((?:f\d{1,4})?e\d{1,6})\]?$")
_KEY = re.compile(r"^[A-Za-z0-9]+(?:\+[A-Za-z0-9]+)*$|^[^\s]$")
SCROLL_DIRECTIONS = ("up", "down")
MAX_TEXT = 2000
FREE_TEXT_VERBS = ("answer", "goto")


@dataclass(frozen=True)
class WebAction:
    verb: str
    ref: str | None = None
    text: str | None = None

    def __str__(self) -> str:
        args = [value for value in (self.ref, self.text) if value is not None]
        shown = ", ".join(arg if arg is self.ref else _quote(arg) for arg in args)
        return f"{self.verb}({shown})"


@dataclass(frozen=True)
class Parsed:
    action: WebAction | None
    problem: str = ""


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _read_arguments(text: str, start: int) -> tuple[list[str], str]:
    """The arguments of a call whose "(" ends at `start`; ("", problem) when malformed."""
    args: list[str] = []
    position, length = start, len(text)
    while True:
        while position < length and text[position] in " \t\r\n":
            position += 1
        if position >= length:
            return args, "the call has no closing parenthesis"
        char = text[position]
        if char == ")" and not args:
            return args, ""
        if char in "\"'":
            value, position, problem = _read_quoted(text, position)
            if problem:
                return args, problem
        else:
            end = position
            while end < length and text[end] not in ",)\n":
                end += 1
            value, position = text[position:end].strip().strip("`"), end
        args.append(value)
        while position < length and text[position] in " \t\r\n":
            position += 1
        if position < length and text[position] == ",":
            position += 1
            continue
        if position < length and text[position] == ")":
            return args, ""
        return args, "arguments must be separated by commas and the call closed with ')'"


def _read_quoted(text: str, position: int) -> tuple[str, int, str]:
    quote, position, out = text[position], position + 1, []
    while position < len(text):
        char = text[position]
        if char == "\\" and position + 1 < len(text):
            following = text[position + 1]
            out.append({"n": "\n", "t": "\t"}.get(following, following))
            position += 2
            continue
        if char == quote:
            return "".join(out), position + 1, ""
        out.append(char)
        position += 1
    return "", position, f"a string opened with {quote} is never closed"


def _ref(value: str) -> str | None:
    match = _REF.match(value.strip().strip("\"'"))
    return match.group(1) if match else None


def _need(count: int, args: list[str], usage: str) -> str:
    return "" if len(args) == count else f"expected {usage}, got {len(args)} argument(s)"


def _build_ref(verb: str, args: list[str]) -> Parsed:
    """``click(ref)``, or with a text, ``fill(ref, "text")`` and ``select(ref, "option")``."""
    with_text = verb != "click"
    usage = f'{verb}(ref, "text")' if with_text else f"{verb}(ref)"
    problem = _need(2 if with_text else 1, args, usage)
    if problem:
        return Parsed(None, problem)
    ref = _ref(args[0])
    if ref is None:
        return Parsed(None, f"{args[0][:40]!r} is not an element ref such as e12 or f1e12")
    if with_text and len(args[1]) > MAX_TEXT:
        return Parsed(None, f"the text is longer than {MAX_TEXT} characters")
    return Parsed(WebAction(verb, ref=ref, text=args[1] if with_text else None))


def _build_text(usage: str, check: Callable[[str], str]) -> Callable[[str, list[str]], Parsed]:
    def build(verb: str, args: list[str]) -> Parsed:
        problem = _need(1, args, usage) or check(args[0])
        return Parsed(None, problem) if problem else Parsed(WebAction(verb, text=args[0]))

    return build


def _check_key(key: str) -> str:
    return "" if _KEY.match(key) and len(key) <= 40 else f"{key[:40]!r} is not a key name"


def _check_direction(direction: str) -> str:
    if direction.lower() in SCROLL_DIRECTIONS:
        return ""
    return f'scroll takes "up" or "down", not {direction[:40]!r}'


def _check_url(url: str) -> str:
    return "" if url.strip() and len(url) <= MAX_TEXT else "goto needs a URL"


def _check_answer(text: str) -> str:
    return "" if len(text) <= MAX_TEXT else f"the answer is longer than {MAX_TEXT} characters"


def _build_back(verb: str, args: list[str]) -> Parsed:
    return Parsed(WebAction(verb)) if not args else Parsed(None, "back() takes no arguments")


BUILDERS: Mapping[str, Callable[[str, list[str]], Parsed]] = {
    "click": _build_ref,
    "fill": _build_ref,
    "select": _build_ref,
    "press": _build_text('press("Key")', _check_key),
    "scroll": _build_text('scroll("down")', _check_direction),
    "goto": _build_text("goto(url)", _check_url),
    "back": _build_back,
    "answer": _build_text('answer("text")', _check_answer),
}


def parse_action(reply: str) -> Parsed:
    """The last action written in `reply`, or why there is none (never raises)."""
    if _THINK_END in reply:
        reply = reply.rsplit(_THINK_END, 1)[1]
    calls = list(_CALL.finditer(reply))
    if not calls:
        return Parsed(None, "no action found.")
    last = calls[-1]
    verb = last.group(1)
    args, problem = _read_arguments(reply, last.end())
    if verb in FREE_TEXT_VERBS and not reply[last.end() :].lstrip().startswith(("'", '"')):
        # A bare answer or URL may hold commas: it runs to the line's last ")".
        line = reply[last.end() :].split("\n", 1)[0]
        if ")" in line:
            args, problem = [line[: line.rindex(")")].strip().strip("`")], ""
    if problem:
        return Parsed(None, f"{verb}(...): {problem}.")
    parsed = BUILDERS[verb](verb, args)
    if parsed.action is None:
        return Parsed(None, f"{verb}(...): {parsed.problem}.")
    if verb == "scroll":
        return Parsed(WebAction(verb, text=parsed.action.text.lower()))
    return parsed
