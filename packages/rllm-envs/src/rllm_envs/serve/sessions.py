"""The envs a server holds: one per open session, each played by one client at a time.

A session owns its env from ``open`` to ``close``; ``close_idle`` closes those no client has
touched for a while (a client that vanished without closing its socket), and ``close_all``
closes every one (the server's shutdown). Env calls go through :mod:`rllm_envs.core.async_env`,
so an env whose I/O lives on an event loop (Web, MCP, SWE) stays on it and the others run in
threads; a session's lock keeps its turns in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rllm_envs.core.async_env import areset, astep
from rllm_envs.serve.protocol import Turn

log = logging.getLogger(__name__)


class CapacityError(RuntimeError):
    """Every session slot is taken."""


class NoEpisodeError(RuntimeError):
    """A step before the session's first reset, or after its episode ended."""


@dataclass
class Session:
    env: Any
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    episode_id: str | None = None
    step_count: int = 0
    episode_done: bool = True
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closing: asyncio.Future | None = None

    def state(self) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "step_count": self.step_count}

    async def reset(
        self, seed: int | None, options: dict[str, Any], episode_id: str | None
    ) -> Turn:
        async with self.lock:
            observation, info = await areset(self.env, seed=seed, options=options or None)
            self.episode_id = episode_id or uuid.uuid4().hex
            self.step_count, self.episode_done = 0, False
            self.last_used = time.monotonic()
            return Turn(observation, info)

    async def step(self, action: str) -> Turn:
        async with self.lock:
            if self.episode_done:
                raise NoEpisodeError("no episode is running: reset first")
            observation, reward, terminated, truncated, info = await astep(self.env, action)
            self.step_count += 1
            self.episode_done = bool(terminated or truncated)
            self.last_used = time.monotonic()
            return Turn(observation, info, float(reward), bool(terminated), bool(truncated))


@dataclass
class Sessions:
    """At most `max_sessions` envs made by `make_env`, keyed by session id."""

    make_env: Callable[[], Any]
    max_sessions: int
    open_sessions: dict[str, Session] = field(default_factory=dict)
    made: int = 0  # envs made over the server's life (the tests count them against closes)
    closed: int = 0

    opening: int = 0  # sessions whose env is being made: they hold a place already

    async def open(self) -> Session:
        # Sessions still making their env count: a connection arriving meanwhile must not
        # take a place that is already promised (a slow env made the server go past its cap).
        if len(self.open_sessions) + self.opening >= self.max_sessions:
            raise CapacityError(f"all {self.max_sessions} sessions are in use")
        self.opening += 1
        try:
            # An env may start a container or browser: off the event loop.
            env = await asyncio.to_thread(self.make_env)
        finally:
            self.opening -= 1
        self.made += 1
        session = Session(env)
        self.open_sessions[session.id] = session
        return session

    async def close(self, session: Session) -> None:
        """Close `session`'s env (once, however many ask). The close goes on when the caller
        is cancelled - a handler cut off by the server's shutdown - and the session stays
        listed until its env is closed, so :meth:`close_all` waits for it."""
        if session.closing is None:
            session.closing = asyncio.ensure_future(self._close_env(session))
        await asyncio.shield(session.closing)

    async def _close_env(self, session: Session) -> None:
        async with session.lock:  # a turn still running finishes first
            try:
                await asyncio.to_thread(session.env.close)
            except Exception:  # noqa: BLE001 - one env's failing close must not stop the rest
                log.exception("closing session %s's env failed", session.id)
        self.open_sessions.pop(session.id, None)
        self.closed += 1

    async def close_idle(self, idle_seconds: float) -> int:
        now = time.monotonic()
        idle = [s for s in self.open_sessions.values() if now - s.last_used > idle_seconds]
        await asyncio.gather(*(self.close(session) for session in idle))
        return len(idle)

    async def close_all(self) -> None:
        await asyncio.gather(*(self.close(s) for s in list(self.open_sessions.values())))
