"""``rllm_tests/Simulator-v0``: a Gymnasium env that cannot be copied (it holds a socket).

Envs that drive an external simulator hold a connection to it; a socket cannot be copied, so
such an env cannot be snapshotted. Importing this module registers the id (a config names it
``tests.envs.uncopyable_env:rllm_tests/Simulator-v0``).
"""

from __future__ import annotations

import socket

import gymnasium as gym
from gymnasium import spaces

ENV_ID = "rllm_tests/Simulator-v0"
MODULE_ENV_ID = f"{__name__}:{ENV_ID}"


class SimulatorEnv(gym.Env):
    """Echoes the action; its simulation link is a socket pair."""

    observation_space = spaces.Discrete(3)
    action_space = spaces.Discrete(2)

    def __init__(self):
        self.link, self.peer = socket.socketpair()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return int(action), 0.0, False, False, {}

    def close(self):
        self.link.close()
        self.peer.close()


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=SimulatorEnv, max_episode_steps=10)
