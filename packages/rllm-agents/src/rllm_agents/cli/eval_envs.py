"""The env side of an rllm-eval run: the keyword arguments the command line gives the env
(the test split by default), the env factory, and the one env made up front to check them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rllm_envs.core.shipped_datasets import TASK_CHOOSING_KWARGS, held_out_tasks_argument
from rllm_envs.core.usage import json_object_argument

from rllm_agents.cli.usage import UsageError, check_env_id, check_text_env


def env_kwargs_from(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = json_object_argument(args.env_kwargs, "--env-kwargs")
    if args.split:
        kwargs["tasks"] = args.split if ":" in args.split else f"shipped:{args.split}"
    elif not TASK_CHOOSING_KWARGS & set(kwargs) and (held_out := held_out_tasks_argument(args.env)):
        kwargs["tasks"] = held_out  # an evaluation scores the test split, not the training one
    return kwargs


def make_env_factory(env_id: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
    """A factory for `env_id` (checked against Gymnasium's registry first) with `kwargs`.

    An EnvSpec, so every episode records which env it played (for ``rllm-eval replay``)."""
    from rllm_agents.execution.env_spec import EnvSpec

    check_env_id(env_id)
    return EnvSpec(env_id, dict(kwargs))


def first_env(env_factory: Callable[[], Any], env_id: str, kwargs: dict[str, Any]) -> Any:
    """One env, made to check the arguments: a split or keyword it refuses is a UsageError."""
    try:
        env = env_factory()
    except Exception as error:  # noqa: BLE001 - whatever the env refuses, the user must read
        given = f" with {kwargs}" if kwargs else ""
        raise UsageError(f"cannot make {env_id}{given}: {error}") from error
    try:
        check_text_env(env, env_id)
    except UsageError:
        env.close()
        raise
    return env


def task_rows(env: Any, num_tasks: int | None) -> list[dict] | None:
    """The env's task rows (first `num_tasks`), or None for envs that draw from seeds."""
    tasks = getattr(env.unwrapped, "tasks", None)
    if tasks is None or not hasattr(tasks, "__getitem__"):
        return None
    count = len(tasks) if num_tasks is None else min(num_tasks, len(tasks))
    return [dict(tasks[i]) for i in range(count)]
