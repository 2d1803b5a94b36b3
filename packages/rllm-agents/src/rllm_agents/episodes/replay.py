"""Replay: play an episode's recorded actions against its env again, with no model.

Each episode's :class:`~rllm_agents.types.EnvRecord` names the env (id, kwargs), the reset
(seed, options) and every action sent; replay makes that env, resets it the same way, sends
the same actions and compares what comes back - the reset observation, then each step's
observation, reward, terminated and truncated - with what was recorded. Any difference is a
:class:`StepDiff`. An env is deterministic given its seed and task, so a run replays without
a diff unless the env's behaviour changed: that is what the golden trajectory tests in
tests/envs/golden check for every shipped env.

Gymnasium envs and PettingZoo parallel envs replay alike: for the latter every value is a
dict by agent (one cycle's joint action, every agent's answer).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.episodes.envs import NotReplayable, RecordedEnvs, check_replayable
from rllm_agents.types import Episode, plain_json

RESET_STEP = 0  # step numbers: 0 is the reset, k the k-th action
COMPARED = ("observation", "reward", "terminated", "truncated")


@dataclass(frozen=True)
class StepDiff:
    """One value that came back different: at `step` (0 = reset), `what` was `recorded`
    and is now `replayed` (None where the replay has no such step)."""

    step: int
    what: str  # observation | reward | terminated | truncated | length | error
    recorded: Any
    replayed: Any

    def describe(self, width: int = 160) -> str:
        where = "reset" if self.step == RESET_STEP else f"step {self.step}"
        return (
            f"{where}: {self.what} recorded {_short(self.recorded, width)}, "
            f"replayed {_short(self.replayed, width)}"
        )


@dataclass
class EpisodeReplay:
    """The replay of one episode: its diffs, or why it could not be replayed."""

    episode_id: str
    steps: int = 0  # actions replayed
    diffs: list[StepDiff] = field(default_factory=list)
    skipped: str | None = None

    @property
    def identical(self) -> bool:
        return self.skipped is None and not self.diffs

    def to_dict(self) -> dict[str, Any]:
        return plain_json(
            {
                "episode_id": self.episode_id,
                "steps": self.steps,
                "identical": self.identical,
                "skipped": self.skipped,
                "diffs": [vars(diff) for diff in self.diffs],
            }
        )


def replay_episode(episode: Episode, envs: RecordedEnvs) -> EpisodeReplay:
    """Replay one episode on an env from `envs` (made once per env and arguments)."""
    result = EpisodeReplay(episode.id)
    try:
        record = check_replayable(episode.env)
        env, (observation, _info) = envs.reset(record)
    except NotReplayable as reason:
        result.skipped = str(reason)
        return result
    except Exception as error:  # noqa: BLE001 - a reset that raises is a behaviour change
        result.diffs.append(StepDiff(RESET_STEP, "error", None, _error_text(error)))
        return result
    _compare(result, RESET_STEP, "observation", record.reset_observation, observation)
    for number, transition in enumerate(record.transitions, start=1):
        try:
            replayed = env.step(transition.action)
        except Exception as error:  # noqa: BLE001 - the env refuses an action it once took
            result.diffs.append(StepDiff(number, "error", None, _error_text(error)))
            return result
        result.steps = number
        recorded = (transition.observation, transition.reward, transition.terminated,
                    transition.truncated)  # fmt: skip
        for what, old, new in zip(COMPARED, recorded, replayed[:4], strict=True):
            _compare(result, number, what, old, new)
        if _ended(replayed[2], replayed[3]) and number < len(record.transitions):
            # An ended env takes no more actions: the rest of the record cannot be replayed.
            result.diffs.append(StepDiff(number, "length", len(record.transitions), number))
            return result
    return result


def replay_episodes(episodes: Iterable[Episode]) -> list[EpisodeReplay]:
    """Replay every episode (envs made once per distinct env and arguments, then closed)."""
    with RecordedEnvs() as envs:
        return [replay_episode(episode, envs) for episode in episodes]


def same(recorded: Any, replayed: Any) -> bool:
    """Whether a replayed value equals a recorded one read back from JSON (floats to within
    rounding: a reward computed as 0.1 + 0.2 must not differ from itself)."""
    if isinstance(recorded, float) or isinstance(replayed, float):
        if isinstance(recorded, (int, float)) and isinstance(replayed, (int, float)):
            if math.isnan(recorded) and math.isnan(replayed):
                return True
            return math.isclose(recorded, replayed, rel_tol=1e-9, abs_tol=1e-12)
        return False
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        return recorded.keys() == replayed.keys() and all(
            same(recorded[key], replayed[key]) for key in recorded
        )
    if isinstance(recorded, list) and isinstance(replayed, list):
        return len(recorded) == len(replayed) and all(
            same(a, b) for a, b in zip(recorded, replayed, strict=True)
        )
    return recorded == replayed and type(recorded) is type(replayed)


def _compare(result: EpisodeReplay, step: int, what: str, recorded: Any, replayed: Any) -> None:
    replayed = plain_json(replayed)
    if not same(recorded, replayed):
        result.diffs.append(StepDiff(step, what, recorded, replayed))


def _ended(terminated: Any, truncated: Any) -> bool:
    """Whether a step's result ends the episode (for PettingZoo: every agent's)."""
    if isinstance(terminated, dict):
        return bool(terminated) and all(
            terminated.get(agent) or truncated.get(agent) for agent in terminated
        )
    return bool(terminated or truncated)


def _error_text(error: Exception) -> str:
    return f"raised {type(error).__name__}: {error}"


def _short(value: Any, width: int) -> str:
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 15]}... ({len(text)} chars)"
