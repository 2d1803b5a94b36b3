"""Making the env an episode recorded, again: for replay and for graders that need the env.

:class:`RecordedEnvs` makes each distinct (api, id, kwargs) once and hands the same env to
every episode that names it, as the execution engine's slots do (envs reset fully); it closes
them all at the end. How an api is made and reset lives in :data:`ENV_APIS`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.execution.env_spec import EnvSpec, ParallelEnvSpec
from rllm_agents.types import EnvRecord


class NotReplayable(Exception):
    """An episode that cannot be played again here; the message says why, in one line."""


def _make_gymnasium(record: EnvRecord) -> Any:
    return EnvSpec(record.id, dict(record.kwargs))()


def _make_parallel(record: EnvRecord) -> Any:
    return ParallelEnvSpec(record.id, dict(record.kwargs))()


# How to make an env of each api an EnvRecord names (rllm_agents.execution.env_spec's names).
ENV_APIS: dict[str, Callable[[EnvRecord], Any]] = {
    "gymnasium": _make_gymnasium,
    "pettingzoo.parallel": _make_parallel,
}


def check_replayable(record: EnvRecord | None) -> EnvRecord:
    """`record`, or NotReplayable saying what is missing."""
    if record is None:
        raise NotReplayable(
            "no env record (written before format version 2, by a workflow without an env, "
            "or with recording off)"
        )
    if record.id is None:
        raise NotReplayable("the env record names no env (the env factory did not say)")
    if record.api not in ENV_APIS:
        raise NotReplayable(f"unknown env api {record.api!r}; known: {', '.join(ENV_APIS)}")
    return record


@dataclass
class RecordedEnvs:
    """Envs made from EnvRecords, one per distinct (api, id, kwargs); a context manager."""

    _envs: dict[str, Any] = field(default_factory=dict)

    def get(self, record: EnvRecord) -> Any:
        record = check_replayable(record)
        key = json.dumps([record.api, record.id, record.kwargs], sort_keys=True, default=str)
        if key not in self._envs:
            try:
                self._envs[key] = ENV_APIS[record.api](record)
            except ImportError as error:  # a missing extra, an unknown module
                raise NotReplayable(f"cannot make {record.id}: {error}") from error
            except Exception as error:  # noqa: BLE001 - the env refuses its recorded kwargs
                raise NotReplayable(
                    f"cannot make {record.id} with {record.kwargs}: {type(error).__name__}: {error}"
                ) from error
        return self._envs[key]

    def reset(self, record: EnvRecord) -> tuple[Any, Any]:
        """The env for `record`, reset as the recorded episode was: (env, reset result)."""
        env = self.get(record)
        return env, env.reset(seed=record.seed, options=record.options)

    def close(self) -> None:
        envs, self._envs = list(self._envs.values()), {}
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001, S110 - cleanup; one failing close must not stop the rest
                pass

    def __enter__(self) -> RecordedEnvs:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
