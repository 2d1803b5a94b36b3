"""The Harbor env's tools: the SWE env's (same grammar, same file tools), told for a container.

``bash`` and ``submit`` are always there. ``view``, ``str_replace``, ``create`` and ``search``
run :mod:`rllm_envs.swe.file_tools` with the image's ``python3``: an image without one offers
bash and submit only.
"""

from __future__ import annotations

import copy
from typing import Any

from rllm_envs.swe.actions import SUBMIT, TOOL_SCHEMAS

FILE_TOOLS = "file_tools.py"
_DESCRIPTIONS = {
    "bash": (
        "Run a bash command in the working directory, as root. Each command runs in a fresh "
        "shell (cd and variables do not carry over). Long output is cut in the middle."
    ),
    SUBMIT: (
        "Submit: the episode ends, and the task's tests check the container's state and decide "
        "the reward."
    ),
}


def _told_for_a_container(schema: dict[str, Any]) -> dict[str, Any]:
    told = copy.deepcopy(schema)
    function = told["function"]
    function["description"] = _DESCRIPTIONS.get(
        function["name"], function["description"].replace("repository", "working directory")
    )
    for parameter in function["parameters"]["properties"].values():
        parameter["description"] = parameter["description"].replace(
            "the repository root", "the working directory"
        )
    return told


def tool_schemas(*, with_file_tools: bool) -> list[dict[str, Any]]:
    """The tools' schemas (OpenAI function format) for a task's container."""
    always = ("bash", SUBMIT)
    return [
        _told_for_a_container(schema)
        for schema in TOOL_SCHEMAS
        if with_file_tools or schema["function"]["name"] in always
    ]


def format_help() -> str:
    return (
        'Call tools with <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call> '
        "(several calls in one reply run in order), or reply with exactly one ```bash``` block "
        'holding a command. When the task is done, call submit (<tool_call>{"name": "submit", '
        '"arguments": {}}</tool_call>, or a ```bash``` block holding only: submit).'
    )
