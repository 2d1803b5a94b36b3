"""Rewards computed by a model: a judge that scores episodes by a rubric (docs/agents/judge.md).

* :class:`Judge` scores one transcript (pointwise) or a group of transcripts of the same task
  at once (relative scores), with any rollout engine, and records each call
  (:class:`JudgeCall`: prompt, raw reply, scores, parse failure).
* :class:`JudgeReward` wraps a Gymnasium env so that the episode's last reward is the judge's
  score (replacing the env's rewards, or added to them).
* ``rllm-train``'s ``reward.judge`` section scores each group of training episodes before
  their advantages are computed (rllm_train.native.judging).
"""

from rllm_agents.rewards.judge import Judge, JudgeCall, JudgeFailed, JudgeLog, JudgeSettings
from rllm_agents.rewards.judge_parse import ParsedScores, parse_scores
from rllm_agents.rewards.judge_prompt import (
    DEFAULT_RUBRIC,
    JudgePrompt,
    Transcript,
    Turn,
    episode_transcript,
)
from rllm_agents.rewards.wrapper import JudgeReward

__all__ = [
    "DEFAULT_RUBRIC",
    "Judge",
    "JudgeCall",
    "JudgeFailed",
    "JudgeLog",
    "JudgePrompt",
    "JudgeReward",
    "JudgeSettings",
    "ParsedScores",
    "Transcript",
    "Turn",
    "episode_transcript",
    "parse_scores",
]
