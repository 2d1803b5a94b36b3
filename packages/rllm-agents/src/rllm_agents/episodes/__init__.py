"""Episodes as data: the record every rollout writes, read back, replayed and re-scored.

* :mod:`~rllm_agents.episodes.records`: :func:`read_episodes` (a file or a run folder, a
  cut-short last line tolerated and reported) and the file layout;
* :mod:`~rllm_agents.episodes.replay`: play the recorded actions again with no model and list
  every step whose observation, reward or end differs (``rllm-eval replay RUN``);
* :mod:`~rllm_agents.episodes.rescore` and :mod:`~rllm_agents.episodes.graders`: grade stored
  episodes again (``rllm-eval rescore RUN --grader ...``).

The record itself (:class:`~rllm_agents.types.Episode` with its
:class:`~rllm_agents.types.EnvRecord`) is documented in docs/agents/episodes.md.
"""

from rllm_agents.episodes.records import (
    EpisodeFileError,
    ReadReport,
    RecordSource,
    episode_files,
    episodes_text,
    read_episodes,
    read_records,
)
from rllm_agents.episodes.replay import EpisodeReplay, StepDiff, replay_episode, replay_episodes
from rllm_agents.episodes.rescore import RescoreRow, RescoreSummary, UnknownGrader, rescore

__all__ = [
    "EpisodeFileError",
    "EpisodeReplay",
    "ReadReport",
    "RecordSource",
    "RescoreRow",
    "RescoreSummary",
    "StepDiff",
    "UnknownGrader",
    "episode_files",
    "episodes_text",
    "read_episodes",
    "read_records",
    "replay_episode",
    "replay_episodes",
    "rescore",
]
