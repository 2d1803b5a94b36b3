"""One loader for objects named ``"module:attribute"``.

Agents, graders, reward functions, agent programs, env classes, MCP tools and the entries of
our own registries are all named this way. ``module`` is an import path or a
``path/to/file.py`` (loaded under a name of its own, once); ``attribute`` may be dotted
(``module:Class.method``). Whatever goes wrong is one :class:`LoadError` whose message is one
line naming what was being loaded, the name, and why.

This is the lowest package (train -> agents -> envs), so every package loads through it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

FORM = "module:name or path/to/file.py:name"


class LoadError(ImportError, ValueError):
    """A ``"module:attribute"`` name that does not load.

    An ImportError, as ``from module import name`` would raise, and a ValueError, as a bad
    value in a config is: code that catches either keeps working.
    """


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def split_spec(spec: str, what: str = "object") -> tuple[str, str]:
    """(module or file, attribute) of ``"module:attribute"``, or a LoadError."""
    location, sep, attribute = spec.rpartition(":") if isinstance(spec, str) else ("", "", "")
    if not sep or not location or not attribute:
        raise LoadError(f"{what} {spec!r}: not of the form {FORM}")
    return location, attribute


def load_module(location: str, what: str = "module", cwd: str | Path | None = None) -> Any:
    """A module by import path, or a ``.py`` file's (relative to `cwd` when given)."""
    if location.endswith(".py"):
        path = Path(location)
        if cwd is not None and not path.is_absolute():
            path = Path(cwd) / path
        return _load_file(path, what)
    try:
        return importlib.import_module(location)
    except ImportError as error:
        raise LoadError(f"{what}: cannot import {location!r} ({_one_line(error)})") from error


def load_attr(spec: str, what: str = "object", cwd: str | Path | None = None) -> Any:
    """The object ``"module:attribute"`` names (see the module docstring), or a LoadError.

    `what` names the thing in the error (``"agent"``, ``"--grader"``, ``"env.agent"``).
    """
    location, attribute = split_spec(spec, what)
    target = load_module(location, f"{what} {spec!r}", cwd)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise LoadError(f"{what} {spec!r}: {location!r} has no {attribute!r}") from None
    return target


def plain_env_id(env_id: str, what: str = "env id") -> str:
    """The registered id of ``"pkg.module:ns/Name-vN"`` once ``pkg.module`` is imported (where
    a third party registers its env, as ``gym.make`` does); a plain id as it is."""
    module_name, sep, plain_id = env_id.rpartition(":")
    if sep:
        load_module(module_name, f"{what} {env_id!r}")
    return plain_id


def import_from_current_folder() -> None:
    """Make the folder a command runs in importable, as ``python -m`` does, for the commands
    installed as scripts (whose first import path is their own bin folder): a user's
    ``--env my_project.envs:my/Env-v0`` is found from the folder holding ``my_project``."""
    import os

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def _load_file(path: Path, what: str) -> Any:
    """A file as a module, under a name of its own: two files named agent.py in different
    folders do not collide, and loading the same file twice gives the same module."""
    if not path.is_file():
        raise LoadError(f"{what}: no such file: {path}")
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    name = f"rllm_loaded_{resolved.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise LoadError(f"{what}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look it up
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - an error in the user's file, reported as such
        del sys.modules[name]
        raise LoadError(f"{what}: cannot load {path} ({_one_line(error)})") from error
    return module
