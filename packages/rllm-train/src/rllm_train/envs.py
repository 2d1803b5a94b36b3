"""Resolving the env to train on: any Gymnasium id, with an optional registering module.

``"pkg.module:ns/Name-vN"`` imports ``pkg.module`` first (where a third party registers its
env), exactly as ``gym.make`` does, so user envs train with no change to rllm. The check runs
before anything slow and names the bad ``env.id``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rllm_train.config import ConfigError


def check_env_id(env_id: str) -> str:
    """The plain registered id of `env_id` (importing its module), or a ConfigError."""
    import rllm_envs  # noqa: F401  (registers the rllm/ ids)

    module_name, sep, plain_id = env_id.rpartition(":")
    if sep:
        try:
            importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigError(f"env.id: cannot import module {module_name!r}: {error}") from error
    if plain_id not in gym.registry:
        close = [name for name in gym.registry if plain_id.split("/")[-1].split("-")[0] in name]
        hint = f"; similar ids: {', '.join(sorted(close)[:5])}" if close else ""
        raise ConfigError(f"env.id: {plain_id!r} is not a registered Gymnasium env{hint}")
    return plain_id


def make_env_factory(env_id: str, kwargs: dict[str, Any]) -> Callable[[], gym.Env]:
    plain_id = check_env_id(env_id)
    arguments = dict(kwargs)
    return lambda: gym.make(plain_id, **arguments)
