"""``rollout.compaction``: what the native trainer's episodes do when a prompt would pass
``rollout.max_prompt_tokens`` (:mod:`rllm_agents.execution.compaction`, docs/training/compaction.md).

By default (``policy=none``) such an episode ends. A policy compacts the context instead and the
episode goes on; each compaction starts a new training sequence whose prompt is the compacted
context as the model saw it, every generated token is trained once, and all the sequences of an
episode share its reward and its advantage (the estimator runs once per episode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rllm_agents.execution.compaction import (
    DEFAULT_SUMMARY_PROMPT,
    CompactionSettings,
    policy_kind,
)

if TYPE_CHECKING:
    from rllm_train.config import TrainConfig


@dataclass
class CompactionConfig:
    # none | last_turns | drop_tool_outputs | summarize | summarize_with | module:function
    policy: str = "none"
    keep_turns: int = 2  # recent turns kept whole (last_turns, drop_tool_outputs)
    keep_chars: int = 200  # what is left of an older env/tool output (drop_tool_outputs)
    summary_prompt: str = DEFAULT_SUMMARY_PROMPT  # summarize*
    summary_tokens: int = 256  # summarize*: the summary's length limit
    # summarize_with: the model that writes the summaries (a name rllm-train knows, or a
    # local folder), served in this process; its summaries are context, never trained on.
    summary_model: str = ""
    target: float = 0.75  # a compacted context fits this share of the budget

    @property
    def enabled(self) -> bool:
        return self.policy != "none"

    def settings(self, summary_engine: Any = None) -> CompactionSettings:
        return CompactionSettings(
            policy=self.policy,
            keep_turns=self.keep_turns,
            keep_chars=self.keep_chars,
            summary_prompt=self.summary_prompt,
            summary_tokens=self.summary_tokens,
            summary_engine=summary_engine,
            target=self.target,
        )


def _multiagent(config: TrainConfig) -> bool:
    from rllm_agents.cli.eval_multiagent import multiagent_env_module

    return multiagent_env_module(config.env.id) is not None


def compaction_problems(config: TrainConfig) -> list[str]:
    """What is wrong with ``rollout.compaction`` in `config` (empty: nothing, or it is off)."""
    compaction = config.rollout.compaction
    if not compaction.enabled:
        return []
    key = "rollout.compaction.policy"
    try:
        kind = policy_kind(compaction.policy)
        CompactionSettings(
            policy=compaction.policy if kind.summary_by != "other" else "summarize",
            keep_turns=compaction.keep_turns,
            keep_chars=compaction.keep_chars,
            summary_tokens=compaction.summary_tokens,
            target=compaction.target,
        )
    except (ValueError, ImportError) as error:
        return [f"{key}: {error}"]
    refusals = {
        kind.summary_by == "other" and not compaction.summary_model: (
            "rollout.compaction.summary_model: summarize_with needs the model that writes the "
            "summaries (e.g. rollout.compaction.summary_model=smollm2)"
        ),
        _multiagent(config): (
            f"{key}: multi-agent games are played by their own engine, which does not compact "
            "yet; leave it none"
        ),
        config.program.given: (
            f"{key}: an agent program manages its own context behind the gateway (a program "
            "that compacts is split into exact sequences there already); leave it none"
        ),
        config.rollout.tree.enabled: (
            f"{key}: tree rollouts branch from one conversation snapshot; they do not compact "
            "yet: turn one of them off"
        ),
        config.rollout.mode == "async" and config.rollout.partial_rollouts: (
            f"{key}: partial rollouts carry episodes over updates; with compaction they are not "
            "supported yet: use rollout.partial_rollouts=false"
        ),
    }
    return [message for refused, message in refusals.items() if refused]
