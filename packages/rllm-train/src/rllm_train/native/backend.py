"""The native backend's entry points (:mod:`rllm_train.run.backends`): check, dry run, train."""

from __future__ import annotations

import os
import socket
import urllib.parse
from pathlib import Path
from typing import Any

from rllm_train.config import ConfigError, TrainConfig
from rllm_train.run.setup import RunSetup


def check(setup: RunSetup) -> None:
    """What the native backend needs that the config alone cannot tell: the model, the env,
    the seats of a game, recorded episodes, a snapshot-able env. Each check is quick (no model
    is loaded); a failed one is a ConfigError naming the key."""
    from rllm_agents.models import EMBEDDED_MODELS, resolve_model

    from rllm_train.envs import check_env
    from rllm_train.native.multiagent_setup import multiagent_setup
    from rllm_train.native.tree import check_tree_env

    config = setup.config
    if config.model.name not in EMBEDDED_MODELS:  # embedded ones are built on first use
        try:
            resolve_model(config.model.name)
        except FileNotFoundError as error:
            raise ConfigError(f"model.name: {error}") from error
    if config.model.init_from:
        from rllm_train.native.checkpoint import checkpoint_file

        try:
            checkpoint_file(config.model.init_from)
        except FileNotFoundError as error:
            raise ConfigError(f"model.init_from: {error}") from error
    multiagent_setup(config)  # a game's seats name policies that exist
    if config.distill.on:
        from rllm_train.native.teacher import check_teacher
        from rllm_train.native.teacher_engines import check_teacher_engine

        # The teacher exists, shares the student's tokenizer, and its engine can serve it.
        check_teacher_engine(config, check_teacher(config))
    if not setup.algorithm.plays_tasks:
        from rllm_train.native.sft_data import select_trajectories, validation_task_ids

        # The files exist and hold episodes that pass, on tasks the run does not validate on.
        select_trajectories(config.sft, validation_task_ids(setup.data.val))
    if not setup.multiagent and setup.env.env_class() is None:
        check_env(config.env.id, config.env.kwargs)
    check_tree_env(config)  # rollout.tree: the env can be snapshotted
    check_ray_cluster(config)


def dry_run(setup: RunSetup) -> str:
    import yaml

    return yaml.safe_dump(setup.config.to_dict(), sort_keys=False)


def train(setup: RunSetup, lock: Any = None) -> list[dict[str, Any]]:
    from rllm_train.native.trainers import trainer_class

    return trainer_class(setup.config)(setup.config, setup=setup, run_lock=lock).train()


def resume_logs(setup: RunSetup) -> list[Path]:
    """The log a resume keeps rows of: ``metrics.jsonl`` (reporting.MetricsLog)."""
    from rllm_train.run.reporting import METRICS_FILE

    return [Path(setup.config.trainer.output) / METRICS_FILE]


# Where Ray's head listens when an address names no port: the GCS, or the Ray Client server.
RAY_DEFAULT_PORTS = {"": 6379, "ray": 10001}


def ray_head(address: str) -> tuple[str, int] | None:
    """(host, port) of the Ray cluster an address names; None when Ray finds or starts one
    itself ("" or "local": a cluster for the run, "auto": the one this machine runs)."""
    if address in ("", "local", "auto"):
        return None
    scheme, _, rest = address.rpartition("://")
    if scheme not in RAY_DEFAULT_PORTS:
        raise ConfigError(f"rollout.ray_address: {address!r} is not HOST:PORT or ray://HOST:PORT")
    try:
        parts = urllib.parse.urlsplit("//" + rest)
        port = parts.port or RAY_DEFAULT_PORTS[scheme]
    except ValueError as error:
        raise ConfigError(f"rollout.ray_address: {address!r}: {error}") from error
    if not parts.hostname:
        raise ConfigError(f"rollout.ray_address: {address!r} names no host")
    return parts.hostname, port


def check_ray_cluster(config: TrainConfig, timeout: float = 5.0) -> None:
    """With `rollout.executor=ray`, that the named cluster's head answers: ray.init waits on
    an address nothing listens at with no end, after the model has been loaded."""
    if config.rollout.executor != "ray":
        return
    head = ray_head(config.rollout.ray_address or os.environ.get("RAY_ADDRESS", ""))
    if head is None:
        return
    try:
        socket.create_connection(head, timeout=timeout).close()
    except OSError as error:
        raise ConfigError(
            f"rollout.ray_address: cannot reach the Ray cluster at {head[0]}:{head[1]} "
            f"(--ray-address or $RAY_ADDRESS): {error.strerror or error}"
        ) from error
