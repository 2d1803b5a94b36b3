"""The HTTP and WebSocket routes of ``rllm-envs serve`` (aiohttp), as OpenEnv's clients call them.

* ``WS /ws``: a session per connection. The client sends ``{"type": "reset" | "step" | "state"
  | "close", "data": {...}}`` and gets ``{"type": "observation", "data": {observation, reward,
  done}}``, ``{"type": "state", "data": {...}}`` or ``{"type": "error", "data": {"message",
  "code"}}``; an error leaves the session usable. The env is closed when the socket closes,
  however it closes, and an idle session is closed by the reaper.
* ``POST /reset`` and ``POST /step``: stateless, as in OpenEnv: each request makes an env,
  plays the call (a step plays on a fresh reset) and closes it. A malformed action is a 422.
* ``GET /state``, ``/schema``, ``/metadata``, ``/health``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from rllm_envs.serve.protocol import (
    MessageError,
    action_from_body,
    reset_arguments,
    schema,
    turn_body,
)
from rllm_envs.serve.sessions import CapacityError, NoEpisodeError, Session, Sessions

log = logging.getLogger(__name__)

SESSIONS_KEY = web.AppKey("sessions", Sessions)
SETTINGS_KEY = web.AppKey("settings", "ServeSettings")
# The open WebSocket responses, closed first when the server shuts down.
SOCKETS_KEY = web.AppKey("sockets", weakref.WeakSet)


@dataclass(frozen=True)
class ServeSettings:
    env_id: str
    description: str = ""
    idle_timeout_s: float = 600.0  # a session nobody touched for this long is closed
    reap_every_s: float = 30.0
    max_message_bytes: int = 4 * 1024 * 1024


def error_body(message: str, code: str) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code}}


async def answer(session: Session, message: Any) -> dict[str, Any] | None:
    """The reply to one WS message (None: the client closes the session)."""
    if not isinstance(message, Mapping):
        return error_body("a message is a JSON object with a type", "INVALID_JSON")
    kind, data = message.get("type"), message.get("data")
    try:
        if kind == "reset":
            seed, options = reset_arguments(data)
            episode_id = data.get("episode_id") if isinstance(data, Mapping) else None
            return {
                "type": "observation",
                "data": turn_body(await session.reset(seed, options, episode_id)),
            }
        if kind == "step":
            return {
                "type": "observation",
                "data": turn_body(await session.step(action_from_body(data))),
            }
        if kind == "state":
            return {"type": "state", "data": session.state()}
        if kind == "close":
            return None
        return error_body(
            f"unknown message type {kind!r} (reset, step, state, close)", "UNKNOWN_TYPE"
        )
    except (MessageError, NoEpisodeError) as error:
        return error_body(str(error), "VALIDATION_ERROR")
    except Exception as error:  # noqa: BLE001 - the env's own failure, told to the client
        log.exception("the env failed on a %s", kind)
        return error_body(f"the env failed: {type(error).__name__}: {error}", "EXECUTION_ERROR")


async def websocket_session(request: web.Request) -> web.WebSocketResponse:
    settings, sessions = request.app[SETTINGS_KEY], request.app[SESSIONS_KEY]
    socket = web.WebSocketResponse(max_msg_size=settings.max_message_bytes)
    await socket.prepare(request)
    request.app[SOCKETS_KEY].add(socket)
    try:
        session = await sessions.open()
    except CapacityError as error:
        await socket.send_json(error_body(str(error), "CAPACITY_REACHED"))
        await socket.close()
        return socket
    except Exception as error:  # noqa: BLE001 - an env that cannot be made, told to the client
        await socket.send_json(error_body(f"cannot make the env: {error}", "FACTORY_ERROR"))
        await socket.close()
        return socket
    try:
        async for frame in socket:
            if frame.type != WSMsgType.TEXT:
                break  # a close, an error or a binary frame ends the session
            try:
                message = json.loads(frame.data)
            except ValueError as error:
                await socket.send_json(error_body(f"invalid JSON: {error}", "INVALID_JSON"))
                continue
            reply = await answer(session, message)
            if reply is None:
                break
            await socket.send_json(reply)
    finally:
        # However the socket ended - close message, dropped connection, server shutdown.
        await sessions.close(session)
        await socket.close()
    return socket


async def read_json(request: web.Request) -> Any:
    if not request.can_read_body:
        return {}
    try:
        return await request.json()
    except ValueError as error:
        raise web.HTTPUnprocessableEntity(text=f"invalid JSON: {error}") from None


async def one_shot(request: web.Request, play) -> web.Response:
    """A stateless call: a fresh env, `play(session)`, then closed."""
    sessions = request.app[SESSIONS_KEY]
    try:
        session = await sessions.open()
    except CapacityError as error:
        raise web.HTTPServiceUnavailable(text=str(error)) from None
    try:
        return web.json_response(turn_body(await play(session)))
    except (MessageError, NoEpisodeError) as error:
        raise web.HTTPUnprocessableEntity(text=str(error)) from None
    finally:
        await sessions.close(session)


async def http_reset(request: web.Request) -> web.Response:
    body = await read_json(request)
    try:
        seed, options = reset_arguments(body)
    except MessageError as error:
        raise web.HTTPUnprocessableEntity(text=str(error)) from None
    return await one_shot(request, lambda session: session.reset(seed, options, None))


async def http_step(request: web.Request) -> web.Response:
    body = await read_json(request)
    try:
        action = action_from_body(body.get("action") if isinstance(body, Mapping) else None)
    except MessageError as error:
        raise web.HTTPUnprocessableEntity(text=str(error)) from None

    async def play(session: Session):
        await session.reset(None, {}, None)
        return await session.step(action)

    return await one_shot(request, play)


async def http_state(request: web.Request) -> web.Response:
    return web.json_response({"episode_id": None, "step_count": 0})  # HTTP holds no episode


async def http_schema(request: web.Request) -> web.Response:
    return web.json_response(schema(request.app[SETTINGS_KEY].env_id))


async def http_metadata(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    return web.json_response(
        {"name": settings.env_id, "description": settings.description, "version": None}
    )


async def http_health(request: web.Request) -> web.Response:
    return web.json_response({"status": "healthy"})


async def reap_idle_sessions(app: web.Application):
    """A background task for the app's life: closes idle sessions, then every session."""
    settings, sessions = app[SETTINGS_KEY], app[SESSIONS_KEY]

    async def reap() -> None:
        while True:
            await asyncio.sleep(settings.reap_every_s)
            closed = await sessions.close_idle(settings.idle_timeout_s)
            if closed:
                log.info("closed %d idle session(s)", closed)

    task = asyncio.create_task(reap())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await sessions.close_all()
    log.info("stopped: %d envs made, %d closed", sessions.made, sessions.closed)


async def close_sockets(app: web.Application) -> None:
    """On shutdown (SIGTERM, ``docker stop``): close every open socket, so each session's
    handler ends and closes its env at once. aiohttp would otherwise wait out its shutdown
    timeout for handlers that only wait for the client's next message."""
    sockets = list(app[SOCKETS_KEY])
    await asyncio.gather(
        *(s.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown") for s in sockets),
        return_exceptions=True,
    )


def build_app(sessions: Sessions, settings: ServeSettings) -> web.Application:
    app = web.Application()
    app[SESSIONS_KEY] = sessions
    app[SETTINGS_KEY] = settings
    app[SOCKETS_KEY] = weakref.WeakSet()
    app.router.add_get("/ws", websocket_session)
    app.router.add_post("/reset", http_reset)
    app.router.add_post("/step", http_step)
    app.router.add_get("/state", http_state)
    app.router.add_get("/schema", http_schema)
    app.router.add_get("/metadata", http_metadata)
    app.router.add_get("/health", http_health)
    app.on_shutdown.append(close_sockets)
    app.cleanup_ctx.append(reap_idle_sessions)
    return app
