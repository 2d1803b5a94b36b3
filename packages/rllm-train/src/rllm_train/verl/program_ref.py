"""`ProgramRef`: the agent program a verl run trains, as its data rows carry it to the workers.

verl's agent-loop workers are separate Ray processes that learn everything about a sample from
its data row, so the program travels as one JSON column (``rllm_program``) next to the task.
The trainer's working directory goes with it: a program named by a relative file path
(``examples/agent.py:run``) or a command that opens relative paths runs in the workers as it
would in the trainer's shell.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ProgramRef:
    """One agent program: a function or a command, with its limits."""

    function: str = ""  # "module:function" or "path/to/file.py:function"
    command: str = ""  # a command line (task on stdin, result on stdout)
    cwd: str = ""  # the trainer's working directory (relative names resolve against it)
    timeout_s: float | None = None  # one run's time limit (None: none)
    retries: int = 1  # a failed run is tried again this many times

    def __post_init__(self) -> None:
        if bool(self.function) == bool(self.command):
            raise ValueError("a program is a function or a command: name exactly one")
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, got {self.retries}")

    @property
    def name(self) -> str:
        return self.function or self.command

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProgramRef | None:
        """The program a row names; None for a row an agent plays (an empty column)."""
        if not text:
            return None
        fields: dict[str, Any] = json.loads(text)
        return cls(**fields)

    def load(self):
        """The program, loaded here (a ProgramSpecError says why it cannot be)."""
        from rllm_agents.programs import command_program, function_program

        if self.command:
            return command_program(self.command, cwd=self.cwd or None)
        return function_program(self.function, cwd=self.cwd or None)
