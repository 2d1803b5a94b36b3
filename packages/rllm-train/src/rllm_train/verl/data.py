"""Tasks as verl data rows: each row carries the whole task, so the env can rebuild the episode.

verl's ``RLHFDataset`` reads Parquet rows and hands every column to the agent loop as keyword
arguments. A row here holds the env id, the env's constructor kwargs, the task row itself
(JSON, so tasks of any shape survive Parquet) and a seed; ``prompt`` only names the task,
because the env writes the real first observation when the agent loop resets it.

A run described by an ``rllm-train`` config writes the tasks its steps play, in order: the
shared plan (:mod:`rllm_train.run.tasks`) the native backend plays too, so verl's data loader
(unshuffled) hands each step the same tasks with the same env seeds. A spec given directly
writes one row per task instead: envs bound to a :class:`~rllm_envs.core.tasks.TaskSet`
contribute one row per task; any other Gymnasium env contributes seeds (its
``reset(seed=...)`` picks the episode).

The agent travels as JSON (its class and every argument: :class:`~rllm_train.run.specs.AgentSpec`),
and so does the env's class when the run makes it directly (``env.entry_point``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_train.run.specs import AgentSpec, EnvSpec
from rllm_train.run.tasks import TaskDraw
from rllm_train.verl.compose import AGENT_LOOP_NAME, PROGRAM_LOOP_NAME
from rllm_train.verl.program_ref import ProgramRef

# The columns our agent loop reads (verl passes them through untouched).
ROW_COLUMNS: tuple[str, ...] = (
    "rllm_env_id",
    "rllm_env_kwargs",
    "rllm_task",
    "rllm_seed",
    "rllm_agent",
    "rllm_max_turns",
    "rllm_max_tokens_per_turn",
    "rllm_timeout_s",
    "rllm_program",
)
# Columns added later: rows written before them read as their default.
OPTIONAL_COLUMNS: dict[str, Any] = {"rllm_env_entry_point": ""}


@dataclass(frozen=True)
class EpisodeSource:
    """How the agent loop builds one episode: which env, which task, which agent."""

    env_id: str
    env_kwargs: Mapping[str, Any]
    task: Mapping[str, Any] | None
    seed: int
    agent: AgentSpec | None  # None: the env's registered agent, with its default arguments
    max_turns: int
    max_tokens_per_turn: int | None = None
    timeout_s: float | None = None  # wall-clock limit of the whole episode
    program: ProgramRef | None = None  # an agent program plays instead of the agent
    env_entry_point: str = ""  # "module:Class" of the env, made instead of gym.make(env_id)

    @property
    def loop_name(self) -> str:
        """The verl agent loop that runs this row."""
        return PROGRAM_LOOP_NAME if self.program is not None else AGENT_LOOP_NAME

    @property
    def env(self) -> EnvSpec:
        return EnvSpec(self.env_id, dict(self.env_kwargs), self.env_entry_point)


def env_task_rows(env_id: str, env_kwargs: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The task rows the env is bound to, or None for an env without a task set."""
    import gymnasium as gym
    import rllm_envs  # noqa: F401  (registers the rllm/ ids)
    from rllm_envs.core.tasks import TaskSet

    env = gym.make(env_id, **dict(env_kwargs))
    try:
        tasks = getattr(env.unwrapped, "tasks", None)
        return [dict(row) for row in tasks.rows] if isinstance(tasks, TaskSet) else None
    finally:
        env.close()


def draw_sources(
    draws: Sequence[TaskDraw],
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    agent: AgentSpec | None,
    max_turns: int,
    max_tokens_per_turn: int | None = None,
    timeout_s: float | None = None,
    program: ProgramRef | None = None,
    env_entry_point: str = "",
) -> list[EpisodeSource]:
    """One episode source per task draw: its row (handed to reset as options["task"]) and seed."""
    return [
        EpisodeSource(
            env_id=env_id,
            env_kwargs=dict(env_kwargs),
            task=dict(draw.row) if draw.row is not None else None,
            seed=draw.seed,
            agent=agent,
            max_turns=max_turns,
            max_tokens_per_turn=max_tokens_per_turn,
            timeout_s=timeout_s,
            program=program,
            env_entry_point=env_entry_point,
        )
        for draw in draws
    ]


def episode_sources(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    *,
    max_tasks: int | None,
    seed_tasks: int,
    seed: int = 0,
    **episode: Any,
) -> list[EpisodeSource]:
    """One source per task of the env's own task set, else `seed_tasks` seeds (`episode`:
    the other fields of :func:`draw_sources`)."""
    rows = env_task_rows(env_id, env_kwargs)
    count = len(rows) if rows is not None else seed_tasks
    if max_tasks is not None:
        count = min(count, max_tasks)
    draws = [
        TaskDraw(seed + index, rows[index] if rows is not None else None) for index in range(count)
    ]
    return draw_sources(draws, env_id=env_id, env_kwargs=env_kwargs, **episode)


def to_verl_row(source: EpisodeSource, index: int) -> dict[str, Any]:
    from rllm_envs.core.tasks import task_id

    name = task_id(source.task, source.env_id) if source.task is not None else f"seed-{source.seed}"
    return {
        "data_source": source.env_id,
        "prompt": [{"role": "user", "content": f"{source.env_id} task {name}"}],
        "agent_name": source.loop_name,
        "rllm_env_id": source.env_id,
        "rllm_env_kwargs": json.dumps(dict(source.env_kwargs), sort_keys=True),
        "rllm_task": json.dumps(source.task, ensure_ascii=False) if source.task is not None else "",
        "rllm_seed": source.seed,
        "rllm_agent": source.agent.to_json() if source.agent is not None else "",
        "rllm_env_entry_point": source.env_entry_point,
        "rllm_max_turns": source.max_turns,
        # 0 stands for "no limit" below: a Parquet column cannot mix numbers and None.
        "rllm_max_tokens_per_turn": source.max_tokens_per_turn or 0,
        "rllm_timeout_s": float(source.timeout_s or 0.0),
        "rllm_program": source.program.to_json() if source.program is not None else "",
        "extra_info": {"index": index, "task_id": name},
    }


def from_verl_row(columns: Mapping[str, Any]) -> EpisodeSource:
    """Rebuild the episode source from the columns verl hands the agent loop."""
    missing = [name for name in ROW_COLUMNS if name not in columns]
    if missing:
        raise ValueError(
            f"verl row lacks {missing}: the data was not written by rllm_train.verl.data "
            f"(agent loops {AGENT_LOOP_NAME!r} and {PROGRAM_LOOP_NAME!r} need rows made by "
            "write_verl_data)"
        )
    columns = {**OPTIONAL_COLUMNS, **columns}
    task_text = str(columns["rllm_task"])
    return EpisodeSource(
        env_id=str(columns["rllm_env_id"]),
        env_kwargs=json.loads(str(columns["rllm_env_kwargs"]) or "{}"),
        task=json.loads(task_text) if task_text else None,
        seed=int(columns["rllm_seed"]),
        agent=AgentSpec.from_json(str(columns["rllm_agent"])),
        max_turns=int(columns["rllm_max_turns"]),
        max_tokens_per_turn=int(columns["rllm_max_tokens_per_turn"]) or None,
        timeout_s=float(columns["rllm_timeout_s"]) or None,
        program=ProgramRef.from_json(str(columns["rllm_program"])),
        env_entry_point=str(columns["rllm_env_entry_point"]),
    )


def write_verl_data(sources: Sequence[EpisodeSource], path: Path) -> Path:
    """Write the rows as Parquet (atomically: a crashed write never leaves half a file)."""
    import pyarrow as pa
    import pyarrow.parquet as parquet

    if not sources:
        raise ValueError(f"no tasks to write to {path}")
    rows = [to_verl_row(source, index) for index, source in enumerate(sources)]
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".parquet.tmp")
    parquet.write_table(pa.Table.from_pylist(rows), temporary)
    temporary.replace(path)
    return path
