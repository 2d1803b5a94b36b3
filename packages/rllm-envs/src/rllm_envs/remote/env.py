"""The client side of the OpenEnv protocol as a Gymnasium env (see the package docstring)."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from typing import Any

import gymnasium as gym

from rllm_envs.core import spaces
from rllm_envs.core.extras import require_extra
from rllm_envs.serve.protocol import turn_from_body

FAILURE_KIND = "remote"


class RemoteError(RuntimeError):
    """The server answered a message with an error (its code and message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def socket_url(url: str) -> str:
    """The session WebSocket of a server at `url` (http(s) or ws(s), with or without /ws)."""
    base = url.rstrip("/")
    for plain, secure in (("http://", "ws://"), ("https://", "wss://")):
        if base.startswith(plain):
            base = secure + base.removeprefix(plain)
    if not base.startswith(("ws://", "wss://")):
        raise ValueError(f"url {url!r}: give the server's address, e.g. http://127.0.0.1:8000")
    return base if base.endswith("/ws") else base + "/ws"


def http_url(url: str) -> str:
    base = socket_url(url).removesuffix("/ws")
    return "http" + base.removeprefix("ws")


class RemoteEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        url: str,
        env: str | None = None,
        action_field: str | None = "text",
        connect_timeout: float = 10.0,
        message_timeout: float = 600.0,
        max_observation_chars: int | None = None,
    ) -> None:
        require_extra("remote", "websockets")
        self.url = socket_url(url)
        self.expected_env = env
        self.action_field = action_field
        self.connect_timeout = connect_timeout
        self.message_timeout = message_timeout
        self.observation_space = (
            spaces.observation_space(max_observation_chars)
            if max_observation_chars
            else spaces.observation_space()
        )
        self.action_space = spaces.action_space()
        self._socket: Any = None
        self._connection = contextlib.ExitStack()
        self._started = False  # a reset has run
        self._episode_over = True

    # -- the Gymnasium API -------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        data: dict[str, Any] = {}
        if seed is not None:
            data["seed"] = int(seed)
        if options:
            data["options"] = options
        if self._socket is None:
            self._connect()
        try:
            body = self._call("reset", data)
        except (OSError, RemoteError) as error:
            self._drop()
            raise ConnectionError(
                f"rllm/Remote-v0 could not reset at {self.url}: {error}"
            ) from error
        turn = turn_from_body(body)
        self._started, self._episode_over = True, False
        return self._text(turn.observation), dict(turn.info)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._episode_over:
            message = "The episode has ended; call reset() to start a new one."
            return self._text(message), 0.0, False, True, {"action_valid": False}
        try:
            data = self._action_data(spaces.action_text(action))
        except ValueError as error:
            return self._text(str(error)), 0.0, False, False, {"action_valid": False}
        try:
            body = self._call("step", data)
        except RemoteError as error:
            if error.code == "VALIDATION_ERROR":  # the action was malformed: the agent's turn
                return self._text(str(error)), 0.0, False, False, {"action_valid": False}
            return self._failed(error)
        except OSError as error:
            return self._failed(error)
        turn = turn_from_body(body)
        self._episode_over = turn.done
        reward = 0.0 if turn.reward is None else float(turn.reward)
        return (
            self._text(turn.observation),
            reward,
            turn.terminated,
            turn.truncated,
            dict(turn.info),
        )

    def close(self) -> None:
        if self._socket is not None:
            try:
                self._socket.send(json.dumps({"type": "close"}))
            except OSError:
                pass  # already gone
            self._drop()
        super().close()

    # -- the wire ----------------------------------------------------------------------------
    def _connect(self) -> None:
        from websockets.sync.client import connect

        if self.expected_env is not None:
            self._check_served_env()
        # websockets holds a connection in a context; the connection's life is this env's.
        self._connection = contextlib.ExitStack()
        try:
            self._socket = self._connection.enter_context(
                connect(self.url, open_timeout=self.connect_timeout, max_size=None)
            )
        except (OSError, TimeoutError) as error:
            raise ConnectionError(f"rllm/Remote-v0 cannot reach {self.url}: {error}") from error

    def _check_served_env(self) -> None:
        try:
            with urllib.request.urlopen(
                http_url(self.url) + "/metadata", timeout=self.connect_timeout
            ) as response:
                served = json.loads(response.read()).get("name")
        except (OSError, ValueError) as error:
            raise ConnectionError(
                f"rllm/Remote-v0 cannot read {self.url}'s metadata: {error}"
            ) from error
        if served != self.expected_env:
            raise ValueError(
                f"rllm/Remote-v0: the server at {self.url} serves {served!r}, not {self.expected_env!r}"
            )

    def _call(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import WebSocketException

        try:
            self._socket.send(json.dumps({"type": kind, "data": data}))
            reply = json.loads(self._socket.recv(timeout=self.message_timeout))
        except (WebSocketException, TimeoutError) as error:
            raise ConnectionError(f"the connection to {self.url} failed: {error}") from error
        if reply.get("type") == "error":
            details = reply.get("data") or {}
            raise RemoteError(str(details.get("code")), str(details.get("message")))
        return reply.get("data") or {}

    def _action_data(self, text: str) -> dict[str, Any]:
        if self.action_field is not None:
            return {self.action_field: text}
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ValueError("this env's actions are JSON objects; the reply was not one")
        return data

    def _failed(self, error: Exception) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The episode ends, truncated: the server or the connection failed, not the agent."""
        self._drop()
        self._episode_over = True
        message = f"The remote env failed ({error}); the episode ends."
        return self._text(message), 0.0, False, True, {"failure": FAILURE_KIND}

    def _drop(self) -> None:
        self._socket = None
        connection, self._connection = self._connection, contextlib.ExitStack()
        try:
            connection.close()  # closes the socket
        except OSError:
            pass

    def _text(self, observation: Any) -> str:
        text = observation if isinstance(observation, str) else json.dumps(observation)
        return spaces.fit_observation(text, self.observation_space)
