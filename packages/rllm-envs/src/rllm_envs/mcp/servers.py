"""Where tools come from: `ServerSpec` names one MCP server (stdio command, HTTP URL, or plain
Python functions served in-process), parsed from the forms users write."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rllm_envs.core.loading import load_attr


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server. Exactly one of `command`, `url` or `functions` is set.

    Specs are hashable and compare by value, so envs in one process that name the same server
    share one connection (and one server process).
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    functions: tuple[Callable[..., Any], ...] = field(default=(), compare=True)

    def __post_init__(self) -> None:
        kinds = [self.command is not None, self.url is not None, bool(self.functions)]
        if sum(kinds) != 1:
            raise ValueError(
                f"MCP server {self.name!r} needs exactly one of 'command', 'url' or 'functions'"
            )

    @property
    def transport(self) -> str:
        if self.command is not None:
            return "stdio"
        return "http" if self.url is not None else "python"


def _function(value: Any) -> Callable[..., Any]:
    function = load_attr(value, what="MCP tool") if isinstance(value, str) else value
    if not callable(function):
        raise TypeError(f"tool {value!r} is not callable")
    return function


def functions_spec(functions: Sequence[Any], name: str = "python") -> ServerSpec:
    """A spec serving plain Python functions (callables or import strings) as MCP tools."""
    return ServerSpec(name=name, functions=tuple(_function(value) for value in functions))


def _from_mapping(name: str, value: Mapping[str, Any]) -> ServerSpec:
    known = {"command", "args", "env", "cwd", "url", "functions"}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"MCP server {name!r}: unknown field(s) {unknown}; known: {sorted(known)}")
    if "functions" in value:
        return functions_spec(value["functions"], name)
    command = value.get("command")
    if command == "python":  # the interpreter running the env, so venv-installed servers work
        command = sys.executable
    return ServerSpec(
        name=name,
        command=command,
        args=tuple(str(arg) for arg in value.get("args", ())),
        env=tuple(sorted((str(k), str(v)) for k, v in dict(value.get("env") or {}).items())),
        cwd=value.get("cwd"),
        url=value.get("url"),
    )


def _from_string(name: str, value: str) -> ServerSpec:
    if value.startswith(("http://", "https://")):
        return ServerSpec(name=name, url=value)
    words = shlex.split(value)
    if not words:
        raise ValueError(f"MCP server {name!r}: empty command")
    command = sys.executable if words[0] == "python" else words[0]
    return ServerSpec(name=name, command=command, args=tuple(words[1:]))


def parse_servers(servers: Any) -> tuple[ServerSpec, ...]:
    """Specs from what users pass as ``servers=``.

    Accepted: a ``{"name": spec}`` mapping (the layout of MCP client config files, also under
    an ``"mcpServers"`` key) where a spec is a command line, a URL, or a mapping with
    ``command``/``args``/``env``/``cwd``, ``url`` or ``functions``; a list of such specs
    (named ``server0``, ...); or `ServerSpec` objects.
    """
    if isinstance(servers, Mapping) and "mcpServers" in servers:
        servers = servers["mcpServers"]
    if isinstance(servers, (str, ServerSpec)) or (
        isinstance(servers, Mapping) and ({"command", "url", "functions"} & set(servers))
    ):
        servers = [servers]
    if isinstance(servers, Mapping):
        named = list(servers.items())
    elif isinstance(servers, Sequence):
        named = [(f"server{index}", value) for index, value in enumerate(servers)]
    else:
        raise TypeError(f"servers must be a mapping or a list, got {type(servers).__name__}")
    specs = []
    for name, value in named:
        if isinstance(value, ServerSpec):
            specs.append(value)
        elif isinstance(value, str):
            specs.append(_from_string(str(name), value))
        elif isinstance(value, Mapping):
            specs.append(_from_mapping(str(name), value))
        else:
            raise TypeError(f"MCP server {name!r}: expected a string or a mapping")
    if not specs:
        raise ValueError("servers is empty: name at least one MCP server")
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"MCP server names must be unique, got {names}")
    return tuple(specs)


def serve(server: Any, http_port: int | None = None) -> None:
    """Run an MCP server (an ``MCPServer``) over stdio, or over Streamable HTTP on loopback
    when `http_port` is given: the two ways the env reaches a server."""
    if http_port is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=http_port)
