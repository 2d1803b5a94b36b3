"""What every setup stage shares: the options, one run's state, a stage, and the two errors.

A stage is a named function that makes (or checks) one part on this machine and returns a few
words saying what it found or did ("present", "built rllm-sandbox:1 on ..."). It is idempotent:
a part already there and up to date is left alone. It reports progress through a
:class:`StageProgress`, so the stages know nothing about how progress is shown.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rllm_envs.core.usage import one_line
from rllm_envs.sandbox.docker_backend import engine_fix

# Builds stream their log while they run, but one step may be silent for minutes (a dpkg run
# on a slow disk); the engine connection waits that long before it gives up on a reply.
ENGINE_TIMEOUT_SECONDS = 900
# An engine's error can carry a whole HTTP exchange; an error line keeps its start.
_DETAIL_CHARS = 240


class SetupError(RuntimeError):
    """A part the command cannot make itself is missing or unusable; the message names the fix."""


class StageFailed(RuntimeError):
    """A stage's own work failed (a download, a build); the message says what happened."""


@dataclass(frozen=True)
class SetupOptions:
    """What to build and under which names (the CLI's defaults are the names the envs read)."""

    sandbox_image: str
    rootfs_image: str
    swe_image_prefix: str
    swe_projects: tuple[str, ...] = ()  # short names; empty: every shipped project
    sandbox_base: str = "auto"  # auto | python | rootfs
    debian_mirror: str | None = None  # None: $RLLM_DEBIAN_MIRROR or Debian's own
    swe_cache: Path | None = None  # None: $RLLM_SWE_CACHE or ~/.cache/rllm/swe
    serve_envs: tuple[str, ...] = ()  # env ids to build serve images of (target serve)
    serve_image_prefix: str = "rllm-serve/"  # the serve images' names start with it
    serve_cache: Path | None = None  # None: $RLLM_SERVE_CACHE or ~/.cache/rllm/serve
    force: bool = False  # rebuild what is already there


class StageProgress(Protocol):
    """How a stage tells what it is doing; the display decides how it looks."""

    def note(self, text: str) -> None:
        """What the stage is doing now (replaces the previous note)."""

    def items(self, total: int) -> None:
        """The stage works through `total` items (images, say); :meth:`advance` counts them."""

    def advance(self, text: str = "") -> None:
        """One item done; `text` says which."""


@dataclass
class Engine:
    """The Docker engine, connected on first use and kept for a run, or why it cannot be (the
    same :class:`SetupError` again, without asking the engine twice)."""

    client: Any = None
    problem: SetupError | None = None

    def connect(self) -> Any:
        if self.problem is not None:
            raise self.problem
        if self.client is None:
            try:
                self.client = connect_engine()
            except SetupError as error:
                self.problem = error
                raise
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


@dataclass
class SetupRun:
    """One run of the command: its options, the engine, and what earlier stages made for
    later ones."""

    options: SetupOptions
    engine: Engine = field(default_factory=Engine)
    swe_base: Any = None  # the SWE base image (a BuiltImage) once the swe-base stage ran

    def docker(self) -> Any:
        """The Docker engine's client; a :class:`SetupError` names the fix when none answers."""
        return self.engine.connect()

    def close(self) -> None:
        self.engine.close()


@dataclass(frozen=True)
class Stage:
    name: str  # as the registry and the display name it: "sandbox-image"
    title: str  # what it makes, for people: "sandbox image (rllm/Code-v0, docker backend)"
    run: Callable[[SetupRun, StageProgress], str]


def short(error: BaseException | str) -> str:
    """An error's message on one line, cut to a length an error line can carry."""
    text = one_line(error)
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."


def connect_engine() -> Any:
    """A docker SDK client of the engine DOCKER_HOST names (default: the local socket)."""
    try:
        import docker
    except ImportError as error:
        raise SetupError("the docker SDK is missing: pip install 'rllm-envs[code,swe]'") from error
    where = os.environ.get("DOCKER_HOST") or "the local socket"
    try:
        client = docker.from_env(timeout=ENGINE_TIMEOUT_SECONDS)
        client.ping()
    except Exception as error:
        raise SetupError(
            f"no Docker engine answers at {where}: {engine_fix()} ({short(error)})"
        ) from error
    return client
