"""The two forms of an agent program, and how each is named on a command line or in a config.

* A **function**: ``async def run(task, base_url, api_key) -> float | str | dict``, passed as an
  object or named ``"module:function"`` / ``"path/to/file.py:function"``. A plain ``def``
  works too; it runs on a worker thread (where a time limit can end the episode but not the
  thread: the call runs on until it returns). A function that also takes a ``model`` keyword
  gets the served model name there.
* A **command**: ``"python my_agent.py --flag"`` (split like a shell would, not run by one).
  It reads the task as one JSON object on stdin, finds the endpoint in ``OPENAI_BASE_URL``,
  ``OPENAI_API_KEY`` and ``OPENAI_MODEL`` (also ``OPENAI_API_BASE``, and the session id in
  ``RLLM_SESSION_ID``), and prints its answer (or a JSON result object) as the last line of
  stdout (:mod:`rllm_agents.programs.result`). Exit status 0 means it finished; any other is a
  crash.

Both are checked when named - the module imports, the function exists, the command's
executable is found - so a typo is one clear :class:`ProgramSpecError` before any episode.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shlex
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rllm_envs.core.loading import LoadError, load_attr

from rllm_agents.programs.process import run_command
from rllm_agents.programs.result import (
    ProgramFailure,
    ProgramResult,
    parse_output,
    parse_result,
    tail,
)


class ProgramSpecError(ValueError):
    """An agent program that cannot be loaded or started; the message says why."""


@dataclass(frozen=True)
class Endpoint:
    """Where a program finds its model: one gateway session."""

    base_url: str
    api_key: str
    model: str
    session_id: str

    def environment(self) -> dict[str, str]:
        """The variables the OpenAI SDK (and most frameworks) read their endpoint from."""
        return {
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_BASE": self.base_url,  # older clients and LiteLLM-style frameworks
            "OPENAI_API_KEY": self.api_key,
            "OPENAI_MODEL": self.model,
            "RLLM_SESSION_ID": self.session_id,
        }


@dataclass(frozen=True)
class ProgramOutput:
    result: ProgramResult
    seconds: float
    stderr: str = ""


class AgentProgram(Protocol):
    name: str

    async def run(
        self, task: dict[str, Any], endpoint: Endpoint, timeout_s: float | None
    ) -> ProgramOutput:
        """Run once on `task`; a ProgramFailure when no usable result came of it."""


@dataclass(frozen=True)
class FunctionProgram:
    function: Callable[..., Any]
    name: str = ""

    async def run(
        self, task: dict[str, Any], endpoint: Endpoint, timeout_s: float | None
    ) -> ProgramOutput:
        started = time.perf_counter()
        try:
            value = await asyncio.wait_for(self._call(task, endpoint), timeout_s)
        except asyncio.TimeoutError:
            raise ProgramFailure("timeout", f"{self.name} still ran after {timeout_s}s") from None
        except Exception as error:  # noqa: BLE001 - whatever the program raised is its crash
            raise ProgramFailure(
                "crashed", f"{self.name} raised {type(error).__name__}: {error}"
            ) from error
        return ProgramOutput(parse_result(value), time.perf_counter() - started)

    async def _call(self, task: dict[str, Any], endpoint: Endpoint) -> Any:
        keywords = {"model": endpoint.model} if _takes_keyword(self.function, "model") else {}
        arguments = (dict(task), endpoint.base_url, endpoint.api_key)
        if inspect.iscoroutinefunction(self.function):
            return await self.function(*arguments, **keywords)
        value = await asyncio.to_thread(self.function, *arguments, **keywords)
        return await value if inspect.isawaitable(value) else value


@dataclass(frozen=True)
class CommandProgram:
    argv: tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # on top of this process's own
    grace_s: float = 2.0  # SIGTERM to SIGKILL at the time limit

    @property
    def name(self) -> str:
        return shlex.join(self.argv)

    async def run(
        self, task: dict[str, Any], endpoint: Endpoint, timeout_s: float | None
    ) -> ProgramOutput:
        environment = {**os.environ, **self.env, **endpoint.environment()}
        try:
            done = await run_command(
                self.argv,
                stdin=json.dumps(task, ensure_ascii=False) + "\n",
                env=environment,
                cwd=self.cwd,
                timeout_s=timeout_s,
                grace_s=self.grace_s,
            )
        except OSError as error:
            raise ProgramFailure("crashed", f"cannot start {self.name!r}: {error}") from error
        stderr = tail(done.stderr)
        if done.timed_out:
            raise ProgramFailure(
                "timeout",
                f"{self.name!r} still ran after {timeout_s}s; its group was killed",
                stderr,
            )
        if done.returncode != 0:
            raise ProgramFailure("crashed", f"{self.name!r} {_exit_text(done.returncode)}", stderr)
        try:
            result = parse_output(done.stdout)
        except ProgramFailure as failure:
            raise ProgramFailure(failure.kind, str(failure), stderr) from None
        return ProgramOutput(result, done.seconds, stderr)


def _exit_text(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _takes_keyword(function: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


# ---- naming a program -------------------------------------------------------------------------


def function_program(spec: str | Callable[..., Any], cwd: str | None = None) -> FunctionProgram:
    """A function program from an object or a ``module:function`` / ``file.py:function`` name
    (a relative file is found under `cwd` when given)."""
    if callable(spec):
        return FunctionProgram(spec, getattr(spec, "__qualname__", repr(spec)))
    try:
        target = load_attr(spec, what="agent program", cwd=cwd)
    except LoadError as error:
        raise ProgramSpecError(str(error)) from error
    if not callable(target):
        raise ProgramSpecError(f"agent program {spec!r} is not callable")
    return FunctionProgram(target, spec)


def command_program(text: str, cwd: str | None = None) -> CommandProgram:
    """A command program from a command line; its executable must exist."""
    try:
        argv = tuple(shlex.split(text))
    except ValueError as error:
        raise ProgramSpecError(f"cannot split the command {text!r}: {error}") from None
    if not argv:
        raise ProgramSpecError("the command is empty")
    executable = argv[0]
    if os.sep in executable:
        found = Path(cwd or ".", executable)
        if not (found.is_file() and os.access(found, os.X_OK)):
            raise ProgramSpecError(f"{executable!r} is not an executable file")
    elif shutil.which(executable) is None:
        raise ProgramSpecError(f"{executable!r} is not on PATH (command {text!r})")
    return CommandProgram(argv, cwd=cwd)


# Program kinds by the name a command line or a config gives them.
PROGRAM_KINDS: dict[str, Callable[[str], AgentProgram]] = {
    "function": function_program,
    "command": command_program,
}


def program_from_options(function: str = "", command: str = "") -> AgentProgram | None:
    """The program named by at most one of `function` and `command` (None when neither)."""
    given = {kind: text for kind, text in (("function", function), ("command", command)) if text}
    if len(given) > 1:
        raise ProgramSpecError("name one agent program: a function or a command, not both")
    if not given:
        return None
    [(kind, text)] = given.items()
    return PROGRAM_KINDS[kind](text)
