"""``rllm/Remote-v0``: an env played on a server that speaks the OpenEnv protocol.

``gym.make("rllm/Remote-v0", url="http://host:8000")`` is a Gymnasium env whose every reset and
step is a message to the server's WebSocket session (``rllm-envs serve ID``, or any OpenEnv
server): RL code uses a remote env exactly as a local one, the async ``areset`` / ``astep`` of
:mod:`rllm_envs.core.async_env` included (they run its calls in a thread).

## Observation
Text: the served observation's ``"text"`` field, or, from a server whose observations have no
such field, the observation object as JSON. Clipped to the observation space.

## Action grammar
Whatever the served env takes. The action's text goes as ``{action_field: text}`` (default
``{"text": ...}``, what ``rllm-envs serve`` expects). With ``action_field=None`` the text must be
a JSON object and goes as it is (for servers with structured actions).

## Reward
The server's reward (0.0 where it sends none).

## Episode end
As the server says: ``terminated`` and ``truncated`` when it sends them (``rllm-envs serve``
does), else ``done`` counts as terminated. A lost connection or a server error ends the
episode truncated with ``info["failure"] = "remote"``; an action the server refuses as
malformed is an invalid action (``info["action_valid"] = False``, the server's message as the
observation) and the episode goes on. A reset that cannot reach the server raises
``ConnectionError`` naming the URL.

## Arguments
``gym.make("rllm/Remote-v0", url, env=None, action_field="text", connect_timeout=10.0,
message_timeout=600.0, max_observation_chars=None)``. ``url``: the server's address (http,
https, ws or wss). ``env``: the id the server must serve (checked on connecting, against its
``/metadata``); None accepts any.

## Version history
- v0: first version.
"""

from rllm_envs.remote.env import RemoteEnv

__all__ = ["RemoteEnv"]
