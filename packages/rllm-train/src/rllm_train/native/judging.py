"""``reward.judge`` in the native trainer: a judge model scores each step's episodes before
their advantages are computed (config/reward.py; docs/agents/judge.md).

A step's episodes come in groups of ``rollout.n`` sharing a task seed. :class:`EpisodeJudging`
asks the judge for a score per usable episode - one call per episode (pointwise) or one per
group (group) - with every call of the step in flight at once, and turns the score into the
reward every trajectory of the episode is trained on (``weight * score``, or added to the
env's). It runs where the episodes are played (``NativeTrainer._play_step``), so with
``rollout.mode=async`` the judging of step s+1 overlaps the update of step s, and a checkpoint
keeps the episodes it played ahead with their judged rewards.

Each episode keeps what the judge said in ``info["judge"]`` (its score, the raw score, the
parse failure, the env's own reward, the call's place in the log), and each step's calls -
prompt, raw reply, scores - are written to ``OUTPUT/judge/step_NNNN.jsonl`` (validation:
``val_NNNN.jsonl``, NNNN the updates done), replaced whole if a resumed run plays the step
again. An episode whose judge call failed (the judge's engine, not its reply) gets
``failure = "judge"``: left out of the update, as an env's infrastructure failure is.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rllm_agents.engines.base import RolloutEngine
from rllm_agents.rewards import Judge, JudgeCall, JudgeFailed, JudgePrompt, JudgeSettings
from rllm_agents.rewards.judge_prompt import DEFAULT_RUBRIC
from rllm_agents.run_folder import write_atomic
from rllm_agents.types import Episode

from rllm_train.config import ConfigError, TrainConfig
from rllm_train.config.reward import AUTO, AUTO_CONSTRAINT, JudgeConfig
from rllm_train.native.batch import usable
from rllm_train.native.sampler import Rollout

JUDGE_FOLDER = "judge"
JUDGE_FAILURE = "judge"  # Episode.failure of an episode whose judge call failed
INFO_KEY = "judge"


def _llamacpp_engine(section: JudgeConfig, device: str) -> RolloutEngine:
    from rllm_agents.engines.llamacpp.server import LlamaCppEngine

    return LlamaCppEngine.start(section.model, slots=section.slots or None)


def _local_engine(section: JudgeConfig, device: str) -> RolloutEngine:
    from rllm_agents.engines.local import LocalEngine

    return LocalEngine.from_name(section.model, device=device)


def _openai_engine(section: JudgeConfig, device: str) -> RolloutEngine:
    from rllm_agents.engines.openai import OpenAIEngine

    api_key = os.environ.get(section.api_key_env) if section.api_key_env else None
    return OpenAIEngine(section.base_url, section.model, api_key=api_key)


# The judge's engine by reward.judge.engine: (section, the trainer's device) -> engine.
JUDGE_ENGINES: dict[str, Callable[[JudgeConfig, str], RolloutEngine]] = {
    "llamacpp": _llamacpp_engine,
    "local": _local_engine,
    "openai": _openai_engine,
}


def judge_settings(section: JudgeConfig) -> JudgeSettings:
    rubric = section.rubric.strip() or DEFAULT_RUBRIC
    if section.rubric_file:
        rubric = Path(section.rubric_file).read_text(encoding="utf-8").strip()
    prompt = JudgePrompt.from_file(section.prompt_file) if section.prompt_file else JudgePrompt()
    constrain = section.constrain
    if constrain == AUTO:
        constrain = AUTO_CONSTRAINT[section.engine]
    return JudgeSettings(
        rubric=rubric,
        prompt=prompt,
        scale=section.scale,
        default_score=section.default_score,
        out_of_range=section.out_of_range,
        constrain=constrain,
        temperature=section.temperature,
        max_tokens=section.max_tokens,
        max_chars=section.max_chars,
    )


def check_judge_run(config: TrainConfig, multiagent: Any) -> None:
    """Refuse what the judge cannot score, or cannot start with, before anything slow starts
    (what the config alone decides is checked with it: config/reward.py)."""
    section = config.reward.judge
    if not section.on:
        return
    if multiagent is not None:
        raise ConfigError(
            "reward.judge.mode: a multi-agent game's seats would each need a rubric of their "
            "own; the judge scores single-agent episodes"
        )
    if section.api_key_env and section.api_key_env not in os.environ:
        raise ConfigError(f"reward.judge.api_key_env: ${section.api_key_env} is not set")
    if section.rubric_file and not Path(section.rubric_file).read_text(encoding="utf-8").strip():
        raise ConfigError(f"reward.judge.rubric_file: {section.rubric_file} is empty")


def task_groups(episodes: Sequence[Episode], groups: Sequence[str]) -> dict[str, list[int]]:
    """The indices of the usable episodes of each task group, in order."""
    members: dict[str, list[int]] = {}
    for index, (episode, group) in enumerate(zip(episodes, groups, strict=True)):
        if usable(episode):
            members.setdefault(group, []).append(index)
    return members


class EpisodeJudging:
    """The judge of a run and where its calls are logged (module doc)."""

    def __init__(self, section: JudgeConfig, output: Path, device: str) -> None:
        self.section = section
        self.folder = Path(output) / JUDGE_FOLDER
        settings = judge_settings(section)
        self.judge = Judge(
            JUDGE_ENGINES[section.engine](section, device), settings, owns_engine=True
        )

    def score(self, rollout: Rollout, groups: Sequence[str], log_name: str) -> Rollout:
        """`rollout` with its usable episodes' rewards from the judge (`groups[i]` names
        episode i's task group); the calls logged to ``judge/<log_name>.jsonl``."""
        episodes = rollout.episodes
        members = task_groups(episodes, groups)
        if self.section.mode == "group":
            batches = list(members.items())
        else:
            batches = [(group, [i]) for group, indices in members.items() for i in indices]
        started = time.perf_counter()
        calls = self.judge.run(self._calls(episodes, batches))
        seconds = time.perf_counter() - started
        for number, ((_, indices), call) in enumerate(zip(batches, calls, strict=True)):
            self._apply(call, number, [episodes[i] for i in indices], log_name)
        self.folder.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(call.to_dict(), ensure_ascii=False) + "\n" for call in calls]
        write_atomic(self.folder / f"{log_name}.jsonl", "".join(lines))
        rollout.judge_seconds += seconds
        return rollout

    async def _calls(
        self, episodes: Sequence[Episode], batches: list[tuple[str, list[int]]]
    ) -> list[JudgeCall]:
        async def one(group: str, indices: list[int]) -> JudgeCall:
            try:
                return await self.judge.score_episodes([episodes[i] for i in indices], label=group)
            except JudgeFailed as failed:
                return failed.call

        return list(await asyncio.gather(*(one(group, indices) for group, indices in batches)))

    def _apply(self, call: JudgeCall, number: int, episodes: list[Episode], log_name: str) -> None:
        for position, episode in enumerate(episodes):
            record: dict[str, Any] = {
                "log": f"{JUDGE_FOLDER}/{log_name}.jsonl",
                "call": number,
                "mode": call.mode,
                "env_reward": episode.reward,
            }
            if call.error is not None:
                episode.failure = JUDGE_FAILURE
                episode.info[INFO_KEY] = {**record, "error": call.error}
                continue
            score = call.scores[position]
            for trajectory in episode.trajectories:
                trajectory.info["env_reward"] = trajectory.reward
                trajectory.reward = self.reward(trajectory.reward, score)
            episode.info[INFO_KEY] = {
                **record,
                "score": score,
                "raw_score": call.raw_scores[position],
                "defaulted": position in call.defaulted,
                "parse_failure": call.parse_failure,
            }

    def reward(self, env_reward: float, score: float) -> float:
        judged = self.section.weight * score
        return env_reward + judged if self.section.use == "add" else judged

    def close(self) -> None:
        self.judge.close()


def judge_metrics(rollout: Rollout, prefix: str = "") -> dict[str, float]:
    """What the judge did to a step's episodes (nothing when none was judged)."""
    judged = [e.info[INFO_KEY] for e in rollout.episodes if INFO_KEY in e.info]
    if not judged:
        return {}
    scored = [record for record in judged if "score" in record]
    calls = {record["call"]: record for record in judged}
    return {
        f"{prefix}judge/score_mean": float(np.mean([r["score"] for r in scored]))
        if scored
        else 0.0,
        f"{prefix}judge/calls": float(len(calls)),
        f"{prefix}judge/parse_failures": float(
            sum(record.get("parse_failure") is not None for record in calls.values())
        ),
        f"{prefix}judge/defaulted": float(sum(bool(r.get("defaulted")) for r in scored)),
        f"{prefix}judge/failed": float(len(judged) - len(scored)),
        f"{prefix}time/judge_s": rollout.judge_seconds,
    }
