"""Problem statements written from the failing behaviour, as a user's bug report would be.

What a statement may say: the project, the public function (or, for a private helper, the
module) whose behaviour changed, how it fails (the exception, or what the failing check saw) and
which behaviours of the test suite broke. What it never says: the file line, the operator, or
anything of the diff. Wording is drawn from several templates by a hash of the instance id, so
statements vary but are reproducible.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_TITLES = (
    "{subject} returns wrong results",
    "Regression: {subject} no longer behaves as documented",
    "Bug in {subject}",
    "{subject} gives unexpected output",
    "Wrong behaviour from {subject}",
)
_TITLES_RAISING = (
    "{subject} raises {exception}",
    "Unexpected {exception} from {subject}",
    "{exception} when calling {subject}",
)
_OPENINGS = (
    "I'm using {project} {version} and ran into a problem with {subject}.",
    "After installing {project} {version}, {subject} stopped working correctly for me.",
    "There seems to be a bug in {project} {version} affecting {subject}.",
    "While working with {project} {version} I noticed that {subject} misbehaves.",
)
_CLOSINGS = (
    "Could you take a look? The library should behave as its documentation describes.",
    "Expected behaviour: the same results as documented. Please fix the library code.",
    "I believe the tests are right and the library is wrong here.",
    "A fix in the library would be much appreciated.",
)
_MAX_SHOWN_TESTS = 4
_MAX_MESSAGE_LINES = 6
_MAX_MESSAGE_CHARS = 600


@dataclass(frozen=True)
class Failure:
    test: str  # node id
    message: str  # the failure message the report gave


def _pick(options: Sequence[str], key: str, salt: str) -> str:
    digest = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return options[digest[0] % len(options)]


def subject_of(module: str, function: str) -> str:
    """How the report names what broke: the public callable, its public class, else the
    module (private helpers and dunder methods are named by what holds them)."""
    parts = function.split(".")
    private = [part.startswith("_") for part in parts]
    if not any(private):
        return f"`{module}.{function}`"
    if not private[0] and len(parts) > 1:
        return f"`{module}.{parts[0]}`"
    return f"the `{module}` module"


def _exception_of(message: str) -> str | None:
    match = re.match(r"^([A-Z][A-Za-z0-9_]*(?:Error|Exception|Warning|Exit|Interrupt))\b", message)
    if match and match[1] != "AssertionError":
        return match[1]
    return None


def _clean_message(message: str) -> str:
    message = re.sub(r" at 0x[0-9a-f]+>", ">", message)  # object addresses differ per run
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    text = "\n".join(lines[:_MAX_MESSAGE_LINES])
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[: _MAX_MESSAGE_CHARS - 3] + "..."
    return text


def _test_name(node_id: str) -> str:
    """``tests/test_x.py::TestK::test_m[1]`` → ``TestK.test_m[1]`` (no file path)."""
    return ".".join(node_id.split("::")[1:]) or node_id


def write_statement(
    *,
    instance_id: str,
    project: str,
    version: str,
    module: str,
    function: str,
    failures: Sequence[Failure],
) -> str:
    """A bug report for one instance (see the module docstring)."""
    subject = subject_of(module, function)
    exceptions = [e for e in (_exception_of(f.message) for f in failures) if e]
    exception = exceptions[0] if exceptions else None
    fields: Mapping[str, str] = {
        "subject": subject,
        "project": project,
        "version": version,
        "exception": f"`{exception}`" if exception else "",
    }
    title_options = _TITLES_RAISING if exception else _TITLES
    title = _pick(title_options, instance_id, "title").format(**fields)
    title = title[0].upper() + title[1:]
    lines = [f"# {title}", "", _pick(_OPENINGS, instance_id, "opening").format(**fields), ""]
    shown = list(failures[:_MAX_SHOWN_TESTS])
    example = next((f for f in shown if _clean_message(f.message)), None)
    if exception:
        lines.append(f"In some situations it raises `{exception}` where it used to work:")
    else:
        lines.append("Its results are not what they should be. A check that fails:")
    if example is not None:
        lines += ["", "```", _clean_message(example.message), "```"]
    names = ", ".join(f"`{_test_name(f.test)}`" for f in shown)
    more = len(failures) - len(shown)
    suffix = f" (and {more} more)" if more > 0 else ""
    lines += [
        "",
        f"The behaviours checked by {names}{suffix} in the project's test suite are affected.",
        "",
        _pick(_CLOSINGS, instance_id, "closing"),
    ]
    return "\n".join(lines) + "\n"
