"""Finding the final answer in a model's reply, and reading plain numbers out of answers.

Pure string functions (no sympy), so they are fast and can never hang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

THINK_END = "</think>"
THINK_START = "<think>"

# `\boxed{..}` and `\fbox{..}`, also written `\boxed 5` (TeX's single-token argument).
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


@dataclass(frozen=True)
class Extraction:
    """The final answer found in a reply, or why there is none (`answer` is None then)."""

    answer: str | None
    reason: str  # "boxed" | "no_boxed_answer" | "unfinished_thinking" | "empty_boxed"


def answer_region(response: str) -> str | None:
    """The part of a reply that holds the answer: the text after the last `</think>`.

    A reply that opens `<think>` and never closes it is still thinking: it has no answer
    region (None), so a box inside the reasoning is not mistaken for the answer.
    """
    if THINK_END in response:
        return response.rsplit(THINK_END, 1)[1]
    if THINK_START in response:
        return None
    return response


# Escaped characters (\\{ and \\} never open or close a group) and braces, in one scan.
_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)
_UNBRACED_TOKEN = re.compile(r"\s+([-+]?[\w.]*\w)")


def _matching_braces(text: str) -> dict[int, int]:
    """Where each `{` that is closed closes, in one linear pass (replies can be 100 kB)."""
    closing: dict[int, int] = {}
    open_positions: list[int] = []
    for token in _BRACE_TOKENS.finditer(text):
        if token[0] == "{":
            open_positions.append(token.start())
        elif token[0] == "}" and open_positions:
            closing[open_positions.pop()] = token.start()
    return closing


def last_boxed(text: str) -> str | None:
    """The argument of the last well-formed `\\boxed`/`\\fbox` in `text` (nesting allowed)."""
    commands = list(_BOX_COMMAND.finditer(text))
    if not commands:
        return None
    closing = _matching_braces(text)
    for command in reversed(commands):
        brace = command.end()
        while brace < len(text) and text[brace].isspace():
            brace += 1
        if brace < len(text) and text[brace] == "{":
            if brace in closing:
                return text[brace + 1 : closing[brace]]
            continue
        # Unbraced (`\\boxed 12.`): the number or word that follows, without punctuation.
        token = _UNBRACED_TOKEN.match(text, command.end())
        if token:
            return token.group(1)
    return None


def extract_final_answer(response: str) -> Extraction:
    region = answer_region(response)
    if region is None:
        return Extraction(None, "unfinished_thinking")
    boxed = last_boxed(region)
    if boxed is None:
        return Extraction(None, "no_boxed_answer")
    boxed = boxed.strip()
    if not boxed:
        return Extraction(None, "empty_boxed")
    return Extraction(boxed, "boxed")


# -- plain numbers (GSM8K-style answers) ------------------------------------------------------
# Decoration around a number that does not change its value: dollar signs, LaTeX spacing,
# percent signs, degree marks, and unit words such as "\text{ dollars}" or "cm".
_DECORATION = (
    (re.compile(r"\\text\{[^{}]*\}|\\mbox\{[^{}]*\}"), ""),
    (re.compile(r"\\[$%]|\\[,!;: ]|\{,\}|\^\{?\\circ\}?|\\degree"), lambda m: "," * ("," in m[0])),
    (re.compile(r"[$%]"), ""),
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# A unit is a word of two or more letters ("5x" or "2 pi" are expressions, not amounts).
_NUMBER = re.compile(
    r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+))(?:\s*(?!pi\b)[A-Za-z]{2,}(?:[ .]+[A-Za-z]+)*)?\.?$"
)


def plain_number(text: str) -> Fraction | None:
    """The value of an answer that is just a number (with commas, `$`, units); else None.

    Exact (a Fraction of the decimal), so `18`, `18.0`, `$18`, `18 dollars` and `1,800`
    / `1{,}800` compare the way a grader of word problems expects, without sympy.
    """
    for pattern, replacement in _DECORATION:
        text = pattern.sub(replacement, text)
    text = _THOUSANDS.sub("", text.strip())
    match = _NUMBER.match(text)
    return Fraction(match.group(1)) if match else None
