"""What ``--algorithm sft`` trains on: the best trajectories of recorded episodes, as sequences.

Episodes are read with the shared reader of episode records
(:func:`rllm_agents.episodes.read_records`): an rllm-eval run folder (``OUTPUT/episodes.jsonl``),
an rllm-train run folder that saved its sampled episodes (``episodes/step_*.jsonl``, with
``trainer.save_episodes``), or an episode file. A bad record is a ConfigError naming its
file and line; a last line cut short by a killed writer is skipped, as everywhere.

The trajectories kept are those - of tasks the run does not validate on - the RL trainer
would train on (:func:`~.batch.trained_trajectories`: no infrastructure failure, no engine
error, the trained model's seats) whose reward is at least ``sft.min_reward`` - optionally
only the best one of each task and role. They become sequences
through the RL batch builders (:data:`~.batch.SEQUENCE_BUILDERS`), so the same tokens carry the
loss as in an RL update: the model's own completions, never the prompt, the env's observations
or the template's glue between turns.

Episodes recorded without token ids (an OpenAI-compatible server that returns none) - or any
episode, with ``sft.retokenize`` - are rendered again turn by turn from each step's recorded
messages with the trained model's chat template (:mod:`rllm_agents.chat.tito`): the prompt as
the model would see it, then the completion text tokenised, ending in EOS unless the turn was
cut at its token limit. Each such turn is its own sequence. The recorded messages do not keep
the env's tool schemas, so a tool env's turns are rendered without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_agents.chat.tito import encode, render_prompt_ids
from rllm_agents.episodes import EpisodeFileError, read_records
from rllm_agents.metrics import task_name
from rllm_agents.types import Episode, Step, Trajectory
from rllm_envs.core.task_set import TaskSet

from rllm_train.config import ConfigError, SFTConfig
from rllm_train.native.batch import SEQUENCE_BUILDERS, TrainSequence, trained_trajectories


@dataclass(frozen=True)
class Selected:
    """One trajectory chosen for fine-tuning, with the group (task and role) it belongs to."""

    trajectory: Trajectory
    group: str
    source: str  # "file:line", for error messages


def read_data(spec: str) -> Iterator[tuple[str, Episode]]:
    """("file:line", episode) for each episode `spec` (one ``sft.data`` entry) holds; an
    unreadable path or record is a ConfigError naming it."""
    try:
        for source, episode in read_records(Path(spec).expanduser()):
            yield str(source), episode
    except EpisodeFileError as error:
        raise ConfigError(f"sft.data: {error}") from None


def task_ids(episode: Episode) -> set[str]:
    """The names an episode's task goes by: its row's ``task_id`` and rllm-eval's task key."""
    task = episode.task if isinstance(episode.task, dict) else {}
    return {str(name) for name in (task.get("task_id"), episode.info.get("task_key")) if name}


def keep_best_per_group(chosen: list[Selected]) -> list[Selected]:
    """The highest-reward trajectory of each group (the first recorded on a tie), in order."""
    best: dict[str, Selected] = {}
    for item in chosen:
        held = best.get(item.group)
        if held is None or item.trajectory.reward > held.trajectory.reward:
            best[item.group] = item
    kept = {id(item) for item in best.values()}
    return [item for item in chosen if id(item) in kept]


@dataclass(frozen=True)
class SelectionCounts:
    episodes: int
    held_out: int  # episodes left out because their task is validated on
    trajectories: int  # trainable trajectories of the other usable episodes
    selected: int


def select_trajectories(
    settings: SFTConfig, held_out: frozenset[str] = frozenset()
) -> tuple[list[Selected], SelectionCounts]:
    """The trajectories to fine-tune on, from every file of ``settings.data``, in order.

    Episodes of a task in `held_out` (the ids of the run's validation rows) are left out, so
    that validation still measures tasks the model never trained on. A ConfigError when a
    file is missing or unreadable, or when nothing reaches the threshold.
    """
    chosen: list[Selected] = []
    episodes = skipped = trajectories = 0
    best_reward = float("-inf")
    for spec in settings.data:
        for source, episode in read_data(spec):
            episodes += 1
            if task_ids(episode) & held_out:
                skipped += 1
                continue
            for trajectory, group in trained_trajectories([episode], [task_name(episode)]):
                trajectories += 1
                best_reward = max(best_reward, trajectory.reward)
                if trajectory.reward >= settings.min_reward:
                    chosen.append(Selected(trajectory, group, source))
    if settings.best_per_task:
        chosen = keep_best_per_group(chosen)
    counts = SelectionCounts(episodes, skipped, trajectories, len(chosen))
    if not chosen:
        best = f" (the best has {best_reward:g})" if trajectories else ""
        validated = f", {skipped} more on validation tasks" if skipped else ""
        raise ConfigError(
            f"sft.min_reward: none of the {trajectories} trainable trajectories in "
            f"{episodes} episodes of {', '.join(settings.data)}{validated} has a reward of at "
            f"least {settings.min_reward:g}{best}; lower sft.min_reward or record better episodes"
        )
    return chosen, counts


def validation_task_ids(val: TaskSet | None) -> frozenset[str]:
    """The task ids of a run's validation rows (none without held-out rows)."""
    if val is None:
        return frozenset()
    return frozenset(str(row["task_id"]) for row in val if row.get("task_id") is not None)


def has_token_ids(trajectory: Trajectory) -> bool:
    return bool(trajectory.response_ids) or any(step.response_ids for step in trajectory.steps)


def retokenized_step(step: Step, tokenizer: Any, source: str) -> Step:
    """`step` with its prompt and completion ids rendered from its recorded messages."""
    messages = list(step.chat_completions)
    if not messages or messages[-1].get("role") != "assistant":
        raise ConfigError(
            f"sft.data: {source}: a turn records no messages ending in the model's reply, so "
            "it cannot be rendered with the chat template"
        )
    completion = encode(tokenizer, str(messages[-1].get("content") or step.model_response))
    # A reply cut at its token limit never ended; any other reply ended where the model stopped.
    if step.finish_reason != "length" and tokenizer.eos_token_id is not None:
        completion.append(tokenizer.eos_token_id)
    return dataclasses.replace(
        step,
        prompt_ids=render_prompt_ids(tokenizer, messages[:-1]),
        response_ids=completion,
        logprobs=[],
    )


def retokenized(trajectory: Trajectory, tokenizer: Any, source: str) -> Trajectory:
    """`trajectory` rendered again turn by turn (no whole-conversation token list: the batch
    builder then makes one sequence per turn)."""
    return dataclasses.replace(
        trajectory,
        steps=[retokenized_step(step, tokenizer, source) for step in trajectory.steps],
        prompt_ids=[],
        response_ids=[],
        response_mask=[],
        response_logprobs=[],
    )


@dataclass(frozen=True)
class SFTData:
    sequences: list[TrainSequence]
    retokenized: int  # trajectories rendered again from their messages


def sft_sequences(
    chosen: list[Selected], tokenizer: Any, mode: str, retokenize: bool, vocab_size: int
) -> SFTData:
    """Training sequences of the chosen trajectories, as the RL batch builder `mode` makes
    them; recorded ids beyond the model's vocabulary are a ConfigError (another model's)."""
    builder = SEQUENCE_BUILDERS[mode]
    sequences: list[TrainSequence] = []
    rendered = 0
    for item in chosen:
        trajectory = item.trajectory
        if retokenize or not has_token_ids(trajectory):
            trajectory = retokenized(trajectory, tokenizer, item.source)
            rendered += 1
        built = builder(trajectory, item.group)
        for sequence in built:
            if sequence.token_ids and max(sequence.token_ids) >= vocab_size:
                raise ConfigError(
                    f"sft.data: {item.source} holds token id {max(sequence.token_ids)}, beyond "
                    f"the model's vocabulary of {vocab_size}: it was recorded with another "
                    "tokenizer; set sft.retokenize=true to render it with this model's template"
                )
        sequences.extend(built)
    if not sequences:
        raise ConfigError(
            "sft.data: the chosen trajectories hold no model tokens to train on (every turn empty)"
        )
    return SFTData(sequences, rendered)
