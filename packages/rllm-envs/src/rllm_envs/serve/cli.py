"""``rllm-envs serve ID``: one env id served with the OpenEnv protocol (see :mod:`.app`).

    rllm-envs serve rllm/FrozenLake-v0 --port 8000
    rllm-envs serve rllm/Math-v0 --env-kwargs '{"tasks": "shipped:test"}' --max-sessions 64
    rllm-envs serve my_pkg.envs:my/Env-v0          # a user's env, registered by its module
    rllm-envs serve CartPole-v1                     # any Gymnasium env, played in text (GymText)

An env whose actions are not text is served through rllm/GymText-v0, which turns it into one;
the server says so when it starts. SIGINT or SIGTERM stops it after every session's env is
closed (containers and browsers included).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rllm_envs.core.loading import import_from_current_folder
from rllm_envs.core.usage import UsageError, check_env_id, json_object_argument

GYMTEXT_ID = "rllm/GymText-v0"


@dataclass(frozen=True)
class ServedEnv:
    """What the server makes for each session: `env_id` with `kwargs`."""

    env_id: str
    kwargs: dict[str, Any]
    description: str = ""  # what /metadata says of it

    def __call__(self) -> Any:
        import gymnasium as gym

        return gym.make(self.env_id, **self.kwargs)


def add_serve_command(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve an env with the OpenEnv protocol (HTTP and WebSocket)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("env", metavar="ID", help="a registered id, or module:ns/Name-vN")
    serve.add_argument("--host", default="127.0.0.1", help="default: %(default)s")
    serve.add_argument("--port", type=int, default=8000, help="default: %(default)s")
    serve.add_argument("--env-kwargs", default="{}", help="JSON keyword arguments of gym.make")
    serve.add_argument(
        "--max-sessions", type=int, default=64, help="envs open at once (default: %(default)s)"
    )
    serve.add_argument(
        "--idle-timeout",
        type=float,
        default=600.0,
        help="seconds after which an untouched session is closed (default: %(default)s)",
    )
    serve.set_defaults(run=run_serve)


def served_env(env_id: str, kwargs: dict[str, Any], say: Callable[[str], None]) -> ServedEnv:
    """The env to serve, checked by making one: a non-text env goes through GymText."""
    import gymnasium as gym

    import_from_current_folder()
    plain_id = check_env_id(env_id, option="rllm-envs serve")
    served = ServedEnv(plain_id, kwargs)
    try:
        env = served()
    except Exception as error:  # noqa: BLE001 - whatever the env refuses, the user must read
        raise UsageError(f"cannot make {plain_id} with {kwargs}: {error}") from error
    try:
        if isinstance(env.action_space, gym.spaces.Text):
            return dataclasses.replace(served, description=description_of(env))
    finally:
        env.close()
    say(
        f"{plain_id} takes {type(env.action_space).__name__} actions: served in text by {GYMTEXT_ID}"
    )
    return served_env(GYMTEXT_ID, {"env_id": plain_id, **kwargs}, say)


def description_of(env: Any) -> str:
    """The first line of the env's own docs: its package's contract card, else its class's."""
    env_class = type(env.unwrapped)
    package = sys.modules.get(env_class.__module__.rpartition(".")[0])
    doc = (package and inspect.getdoc(package)) or inspect.getdoc(env_class) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def run_serve(args: argparse.Namespace) -> int:
    from rllm_envs.core.extras import MissingExtraError, require_extra

    try:
        require_extra("serve", "aiohttp")
    except MissingExtraError as error:
        raise UsageError(str(error)) from None
    from aiohttp import web

    from rllm_envs.serve.app import ServeSettings, build_app
    from rllm_envs.serve.sessions import Sessions

    kwargs = json_object_argument(args.env_kwargs, "--env-kwargs")
    if args.max_sessions < 1:
        raise UsageError("--max-sessions must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    make_env = served_env(args.env, kwargs, print)
    settings = ServeSettings(
        env_id=make_env.env_id,
        description=make_env.description,
        idle_timeout_s=args.idle_timeout,
    )
    app = build_app(Sessions(make_env, args.max_sessions), settings)
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        print=lambda _: print(
            f"serving {make_env.env_id} on http://{args.host}:{args.port}", flush=True
        ),
    )
    return 0
