"""The execution engine's settings, in groups: what ends an episode, how episodes are scheduled,
what a run writes and what each episode records.

    AgentExecutionEngine(
        agent_factory, env_factory, engine,
        limits=EpisodeLimits(max_turns=4, trajectory_timeout=60),
        scheduling=Scheduling(n_parallel=16, dispatch="lockstep"),
        output=RunOutput(output_path="episodes.jsonl"),
    )

Each field may also be given to the engine on its own (``n_parallel=16``): it lands in its
group (:func:`grouped_settings`), so the flat form of earlier releases and of rLLM reads the
same. The groups check their values when made, so a bad one is refused before any episode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm_agents.execution.compaction import CompactionSettings
from rllm_agents.execution.dispatch import check_dispatch
from rllm_agents.execution.env_slot import check_call_policy


@dataclass(frozen=True)
class EpisodeLimits:
    """What ends an episode whatever the env says (token budgets need a tokenizer to count
    the env's turns; without one only the model's completion tokens are counted)."""

    max_turns: int = 8
    max_prompt_tokens: int | None = None  # the first prompt
    max_response_tokens: int | None = None  # everything after it, model and env turns alike
    max_context_tokens: int | None = None  # any turn's whole prompt (the conversation so far)
    trajectory_timeout: float | None = None  # seconds, not counting time queued for the engine
    # What happens when a prompt would pass max_context_tokens: by default the episode ends;
    # a policy compacts the context instead (rllm_agents.execution.compaction).
    compaction: CompactionSettings = field(default_factory=CompactionSettings)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")


@dataclass(frozen=True)
class Scheduling:
    """How episodes share the machine and the model (where they run, the executor, is an
    object of its own: it holds workers between runs)."""

    n_parallel: int = 8  # episodes at once (lockstep runs every task of a call at once)
    dispatch: str = "async"  # "async" | "lockstep" (rllm_agents.execution.dispatch)
    sampling_seed: int | None = None  # each request seeded from (this, episode, turn)
    env_calls: str = "auto"  # where env calls run (rllm_agents.execution.env_slot)

    def __post_init__(self) -> None:
        if self.n_parallel < 1:
            raise ValueError(f"n_parallel must be at least 1, got {self.n_parallel}")
        check_dispatch(self.dispatch)
        check_call_policy(self.env_calls, "env_calls")


@dataclass(frozen=True)
class RunOutput:
    """What a run writes and shows as it goes (both engines, agents' and workflows')."""

    output_path: Path | None = None  # each finished episode streamed here, one JSON line
    output_append: bool = False  # add to output_path (a resumed evaluation)
    progress: bool | None = None  # a progress bar (None: only when stderr is a terminal)

    def __post_init__(self) -> None:
        # A str path is taken as a Path, an empty one as none (frozen: set through object).
        path = Path(self.output_path) if self.output_path else None
        object.__setattr__(self, "output_path", path)


@dataclass(frozen=True)
class Recording:
    """What each episode carries about how it was played."""

    record_env: bool = True  # the env's id, arguments, seed and every call (replay, rescore)
    policy: Mapping[str, Any] = field(default_factory=dict)  # who played: name, version, ...


# The groups by the keyword that passes each to the engine.
GROUPS: dict[str, type] = {
    "limits": EpisodeLimits,
    "scheduling": Scheduling,
    "output": RunOutput,
    "recording": Recording,
}
# Each group's fields, by the name they may also be given on their own.
FLAT_FIELDS: dict[str, str] = {
    field.name: group for group, kind in GROUPS.items() for field in dataclasses.fields(kind)
}


def grouped_settings(given: Mapping[str, Any], flat: Mapping[str, Any]) -> dict[str, Any]:
    """Each group (keyword -> object) from the groups `given` (None: the defaults) with the
    fields `flat` names on their own laid over them; an unknown name is a TypeError."""
    unknown = sorted(set(flat) - set(FLAT_FIELDS))
    if unknown:
        raise TypeError(
            f"AgentExecutionEngine got unknown settings {unknown}; groups: "
            f"{', '.join(GROUPS)}; settings: {', '.join(FLAT_FIELDS)}"
        )
    groups = {}
    for name, kind in GROUPS.items():
        group = given.get(name)
        if group is not None and not isinstance(group, kind):
            raise TypeError(f"{name}= takes a {kind.__name__}, not {type(group).__name__}")
        changes = {key: value for key, value in flat.items() if FLAT_FIELDS[key] == name}
        groups[name] = dataclasses.replace(group or kind(), **changes)
    return groups
