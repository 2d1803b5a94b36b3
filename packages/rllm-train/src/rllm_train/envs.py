"""Resolving the env to train on: any Gymnasium id, with an optional registering module.

``"pkg.module:ns/Name-vN"`` imports ``pkg.module`` first (where a third party registers its
env), exactly as ``gym.make`` does, so user envs train with no change to rllm. The checks run
before anything slow and name the bad ``env.id`` or ``env.kwargs``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
from rllm_agents.cli import usage

from rllm_train.config import ConfigError


def check_env_id(env_id: str) -> str:
    """The plain registered id of `env_id` (importing its module), or a ConfigError."""
    try:
        return usage.check_env_id(env_id)
    except usage.UsageError as error:
        from rllm_envs.multiagent import ENV_MODULES

        raise ConfigError(f"env.id: {error}; multi-agent envs: {', '.join(ENV_MODULES)}") from error


def check_env(env_id: str, kwargs: dict[str, Any]) -> str:
    """Make (and close) one env of `env_id` with `kwargs`: what it refuses is a ConfigError.

    Run before training, so a bad ``env.kwargs`` (an unknown keyword, a split that does not
    exist) is named at once instead of failing every episode of the run.
    """
    plain_id = check_env_id(env_id)
    try:
        env = gym.make(plain_id, **kwargs)
    except Exception as error:  # noqa: BLE001 - whatever the env refuses, the user must read
        raise ConfigError(f"env.kwargs: cannot make {plain_id!r} with {kwargs}: {error}") from error
    try:
        usage.check_text_env(env, plain_id)
    except usage.UsageError as error:
        raise ConfigError(f"env.id: {error}") from error
    finally:
        env.close()
    return plain_id


def make_env_factory(
    env_id: str, kwargs: dict[str, Any], entry_point: str = ""
) -> Callable[[], gym.Env]:
    """gym.make(env_id, **kwargs), or Class(**kwargs) for an ``env.entry_point`` "module:Class"."""
    if entry_point:
        from rllm_envs.core.loading import LoadError, load_attr

        try:
            env_class = load_attr(entry_point, what="env.entry_point")
        except LoadError as error:
            raise ConfigError(str(error)) from error
        arguments = dict(kwargs)
        return lambda: env_class(**arguments)
    plain_id = check_env_id(env_id)
    arguments = dict(kwargs)
    return lambda: gym.make(plain_id, **arguments)
