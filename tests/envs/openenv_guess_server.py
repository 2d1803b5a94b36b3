"""A number-guessing env written with openenv-core's own server code (``create_app``), served
by uvicorn: what rllm/Remote-v0 must play without knowing it was not written with rllm.

Run: ``python tests/envs/openenv_guess_server.py PORT``. The secret is ``seed % 10``; a guess
is ``{"guess": "<digit>"}``; the observation says higher or lower; reward 1.0 on the secret;
done on the secret or after three guesses.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

MAX_GUESSES = 3


class GuessAction(Action):
    guess: str


class GuessObservation(Observation):
    hint: str = ""


class GuessEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.secret = 0
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **_: Any):
        self.secret = (seed or 0) % 10
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(hint="guess a digit", done=False, reward=None)

    def step(self, action: GuessAction, **_: Any):
        self._state.step_count += 1
        try:
            guess = int(action.guess)
        except ValueError:
            guess = -1
        right = guess == self.secret
        hint = "right" if right else ("higher" if guess < self.secret else "lower")
        done = right or self._state.step_count >= MAX_GUESSES
        return GuessObservation(hint=hint, done=done, reward=1.0 if right else 0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnv, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=8)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
