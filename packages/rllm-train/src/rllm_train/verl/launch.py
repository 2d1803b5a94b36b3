"""Prepare a verl run (data rows, agent-loop registration, composed and validated config),
print it for ``--dry-run``, or hand it to verl's own trainer on Ray.

Everything that can fail for a reason the user can fix happens in :func:`prepare_run`, before
Ray starts: the spec checks, verl's Hydra schema, verl's ``validate_config``, env creation and
task loading.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_train.config import ConfigError
from rllm_train.run.failures import TooManyFailedEpisodes
from rllm_train.run.tasks import TaskDraw
from rllm_train.verl.compose import (
    AGENT_LOOPS,
    RunFiles,
    compose_verl_config,
    validate_verl_config,
)
from rllm_train.verl.data import (
    EpisodeSource,
    draw_sources,
    episode_sources,
    to_verl_row,
    write_verl_data,
)
from rllm_train.verl.spec import VerlConfigError, VerlRunSpec, validate_spec
from rllm_train.verl.versions import require_verl


@dataclass(frozen=True)
class PreparedRun:
    spec: VerlRunSpec
    files: RunFiles
    config: Any  # verl's DictConfig
    train_sources: tuple[EpisodeSource, ...]
    val_sources: tuple[EpisodeSource, ...]


def _drawn_sources(
    spec: VerlRunSpec, draws: Sequence[TaskDraw], env_kwargs: dict[str, Any]
) -> tuple[EpisodeSource, ...]:
    return tuple(draw_sources(draws, env_id=spec.env_id, env_kwargs=env_kwargs, **_episode(spec)))


def _episode(spec: VerlRunSpec) -> dict[str, Any]:
    """How each of the run's episodes is played (the fields every source shares)."""
    return {
        "agent": spec.agent,
        "max_turns": spec.max_turns,
        "max_tokens_per_turn": spec.max_tokens_per_turn,
        "timeout_s": spec.episode_timeout_s,
        "program": spec.program,
        "env_entry_point": spec.env_entry_point,
    }


def _sources(
    spec: VerlRunSpec,
    env_kwargs: dict[str, Any],
    max_tasks: int | None,
    rows: tuple[dict[str, Any], ...] | None = None,
    draws: tuple[TaskDraw, ...] | None = None,
) -> tuple[EpisodeSource, ...]:
    if draws is not None:  # the shared plan, as it is
        if not draws:
            raise VerlConfigError(f"no tasks planned for {spec.env_id!r}")
        return _drawn_sources(spec, draws, env_kwargs)
    if rows is not None:
        if not rows:
            raise VerlConfigError(f"no task rows given for {spec.env_id!r}")
        given = rows if max_tasks is None else rows[:max_tasks]
        return _drawn_sources(
            spec,
            tuple(TaskDraw(spec.seed + index, dict(row)) for index, row in enumerate(given)),
            env_kwargs,
        )
    if spec.env_entry_point:
        raise VerlConfigError(
            "env.entry_point: an env made from its class has no registered id to read its "
            "tasks from; give the run task rows (data.train)"
        )
    try:
        sources = episode_sources(
            spec.env_id,
            env_kwargs,
            max_tasks=max_tasks,
            seed_tasks=spec.seed_tasks,
            seed=spec.seed,
            **_episode(spec),
        )
    except Exception as error:  # noqa: BLE001 - any env construction error is a config error here
        raise VerlConfigError(f"cannot build {spec.env_id!r} to read its tasks: {error}") from error
    if not sources:
        raise VerlConfigError(f"{spec.env_id!r} has no tasks to train on")
    return tuple(sources)


def prepare_run(spec: VerlRunSpec) -> PreparedRun:
    """Check everything and compose verl's config; writes nothing."""
    validate_spec(spec)
    require_verl(for_training=False)
    files = RunFiles(Path(spec.output_dir).expanduser().resolve())
    config = compose_verl_config(spec, files)
    validate_verl_config(config)
    if spec.agent is not None:  # a typo here would otherwise fail every episode on the workers
        try:
            spec.agent.agent_class()
        except ConfigError as error:
            raise VerlConfigError(str(error)) from error
    if spec.program is not None:  # likewise for a program's module, file or executable
        _check_program(spec.program)
    train = _sources(spec, spec.env_kwargs, spec.max_tasks, spec.train_rows, spec.train_tasks)
    val = (
        _sources(spec, spec.val_env_kwargs, spec.max_val_tasks, spec.val_rows, spec.val_tasks)
        if spec.val_env_kwargs is not None
        else ()
    )
    if spec.program is not None and any(source.task is None for source in (*train, *val)):
        raise VerlConfigError(
            f"program: an agent program is given task rows, and {spec.env_id!r} draws its "
            "episodes from seeds; name task rows in data.train"
        )
    if len(train) < spec.train_batch_size:
        raise VerlConfigError(
            f"{spec.env_id!r} yields {len(train)} tasks, fewer than train_batch_size "
            f"{spec.train_batch_size}: lower train_batch_size or add tasks"
        )
    return PreparedRun(spec, files, config, train, val)


def _check_program(program) -> None:
    from rllm_agents.programs import ProgramSpecError

    key = "program.function" if program.function else "program.command"
    try:
        program.load()
    except ProgramSpecError as error:
        raise VerlConfigError(f"{key}: {error}") from error


def write_run_files(prepared: PreparedRun) -> RunFiles:
    """Write the Parquet rows and the agent-loop registration verl's workers load."""
    files = prepared.files
    write_verl_data(prepared.train_sources, files.train_file)
    if prepared.val_sources:
        write_verl_data(prepared.val_sources, files.val_file)
    files.agent_loop_file.parent.mkdir(parents=True, exist_ok=True)
    # verl's workers are separate Ray processes: they learn our loop from this file (by import
    # path), not from the in-process `register` call.
    files.agent_loop_file.write_text(
        "".join(f"- name: {name}\n  _target_: {target}\n" for name, target in AGENT_LOOPS.items()),
        encoding="utf-8",
    )
    return files


def describe(prepared: PreparedRun) -> str:
    """The composed verl config and the data layout, as ``--dry-run`` prints them."""
    from omegaconf import OmegaConf

    sample = to_verl_row(prepared.train_sources[0], 0)
    lines = [
        "# verl trainer config (verl's ppo_trainer with our overrides; validated by verl)",
        OmegaConf.to_yaml(prepared.config).rstrip(),
        "",
        "# data layout",
        f"# train rows: {len(prepared.train_sources)} -> {prepared.files.train_file}",
        f"# val rows:   {len(prepared.val_sources)}"
        + (f" -> {prepared.files.val_file}" if prepared.val_sources else " (no validation)"),
        f"# samples per step: {prepared.spec.train_batch_size} tasks x {prepared.spec.n_samples}"
        f" = {prepared.spec.train_batch_size * prepared.spec.n_samples} episodes",
        f"# columns: {sorted(sample)}",
        "# first row:",
        "# " + json.dumps(sample, ensure_ascii=False, sort_keys=True),
        f"# agent loop: {sample['agent_name']} -> {AGENT_LOOPS[sample['agent_name']]} "
        f"(via {prepared.files.agent_loop_file})",
    ]
    return "\n".join(lines) + "\n"


def dry_run(spec: VerlRunSpec) -> str:
    return describe(prepare_run(spec))


def require_gpus(spec: VerlRunSpec) -> None:
    """Fail here, not inside a Ray worker, when no GPU can run the job.

    With ``RAY_ADDRESS`` set the job joins an existing cluster whose nodes have the GPUs, so
    only a local launch needs one on this machine.
    """
    import os

    import torch

    if os.environ.get("RAY_ADDRESS") or torch.cuda.is_available():
        return
    raise VerlConfigError(
        f"the verl backend trains on GPUs ({spec.n_gpus_per_node} per node x {spec.nnodes} "
        "node(s) configured) and this machine has none: use --backend native here, --dry-run "
        "to check the verl config, or set RAY_ADDRESS to a Ray cluster with GPUs"
    )


def run(spec: VerlRunSpec) -> list[dict[str, Any]]:
    """Train with verl's own trainer on Ray: on GPUs, or in rllm's CPU mode."""
    import sys

    from rllm_train.verl.cpu.runner import ray_cluster, run_verl
    from rllm_train.verl.metrics_bridge import publish
    from rllm_train.verl.node_loss import NodesDied, node_lost
    from rllm_train.verl.placement import cpu_mode_notice

    require_verl(for_training=True)
    if spec.device == "cuda":
        require_gpus(spec)
    prepared = prepare_run(spec)
    notice = cpu_mode_notice(spec.device, spec.device_chosen_for_user, spec.rollout_engine)
    if notice:
        print(notice, file=sys.stderr)
    write_run_files(prepared)
    if spec.device == "cuda":
        from verl.utils.device import auto_set_device

        auto_set_device(prepared.config)
    try:
        run_verl(prepared.config, ray_cluster(spec, prepared.files.root), spec.mode)
    except TooManyFailedEpisodes as error:
        # Raised in verl's trainer (verl/failure_check.py), it reaches here wrapped by Ray
        # with the remote traceback: the run stops with the rule's own one line.
        raise TooManyFailedEpisodes(str(getattr(error, "cause", None) or error)) from None
    except NodesDied as died:
        raise node_lost(died, prepared.files.checkpoint_dir) from None
    finally:
        # Whatever verl logged, also from a run that failed or was interrupted.
        rows = publish(
            prepared.files.root, title=run_title(spec), temperatures=temperatures(prepared.config)
        )
    return rows


def temperatures(config) -> tuple[float | None, float | None]:
    """(training, validation) sampling temperatures of verl's config, for the curve's labels."""
    from omegaconf import OmegaConf

    rollout = "actor_rollout_ref.rollout"
    return (
        OmegaConf.select(config, f"{rollout}.temperature", default=None),
        OmegaConf.select(config, f"{rollout}.val_kwargs.temperature", default=None),
    )


def run_title(spec: VerlRunSpec) -> str:
    model = Path(spec.model_path).name or spec.model_path
    return f"{model} on {spec.env_id} ({spec.algorithm}, verl on {spec.device})"
