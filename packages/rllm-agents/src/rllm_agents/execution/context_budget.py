"""Fitting each turn's prompt into the episode's context budget: the engine's side of
:mod:`rllm_agents.execution.compaction` (when to compact, the summary requests, the record).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rllm_agents.chat import encode
from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution.compaction import (
    CompactionRecord,
    CompactionSettings,
    ContextView,
    Messages,
    drop_tool_outputs,
    keep_last_turns,
    split_turns,
    summary_context,
)
from rllm_agents.execution.dispatch import Dispatch, request_seed
from rllm_agents.execution.turns import EpisodeRun, ModelFailure


@dataclasses.dataclass(frozen=True)
class BudgetContext:
    """What fitting a prompt needs from the engine."""

    budget: int
    settings: CompactionSettings
    sampling: SamplingParams
    tokenizer: Any
    sampling_seed: int | None = None


async def fit_context(
    dispatch: Dispatch, run: EpisodeRun, turn: int, messages: Messages, fit: BudgetContext
) -> Messages:
    """`messages` as the model should see them this turn: as they are while they fit, else
    compacted (recorded on `run`). What cannot fit even compacted is left to the caller's
    budget check (the episode then ends ``prompt_too_long``)."""
    conversation = run.conversation
    assert conversation is not None
    settings = fit.settings
    before = conversation.prompt_length(messages)
    if before <= fit.budget - settings.reserve():
        return messages
    kind = settings.kind
    target = int(fit.budget * settings.target)
    summary, summary_ids, trained = None, [], False
    if kind.summary_by is not None:
        summary, summary_ids, trained = await _summary(dispatch, run, turn, messages, fit)
        compacted = summary_context(messages, summary)
    else:
        compacted = kind.rewrite(messages, settings) or messages
    compacted = _fewer_turns(conversation, compacted, target, settings.keep_turns)
    if compacted == messages and summary is None:
        return messages  # nothing to remove: the budget check ends the episode
    run.context = ContextView(anchor=len(run.agent.chat_completions), head=compacted)
    run.compactions.append(
        CompactionRecord(
            turn=turn,
            policy=settings.policy,
            messages_before=len(messages),
            messages_after=len(compacted),
            tokens_before=before,
            tokens_after=conversation.prompt_length(compacted),
            summary=summary,
            summary_trained=trained,
            summary_tokens=len(summary_ids),
        )
    )
    return compacted


def _fewer_turns(conversation: Any, messages: Messages, budget: int, keep: int) -> Messages:
    """`messages`, or with fewer of its last turns kept (down to one) until it fits `budget`;
    then the last turn with its outputs cut too; at worst the task alone."""
    if conversation.prompt_length(messages) <= budget:
        return messages
    turns = len(split_turns(messages))
    for kept in range(min(keep, turns), 0, -1):
        shorter = keep_last_turns(messages, kept)
        if shorter is not None and conversation.prompt_length(shorter) <= budget:
            return shorter
    # The latest turn alone is too long: the model still sees its own last move, and the start
    # and end of what came back.
    last = keep_last_turns(messages, 1) or messages
    cut = drop_tool_outputs(last, CompactionSettings(policy="drop_tool_outputs", keep_turns=0))
    if cut is not None and conversation.prompt_length(cut) <= budget:
        return cut
    return keep_last_turns(messages, 0) or messages


async def _summary(
    dispatch: Dispatch, run: EpisodeRun, turn: int, messages: Messages, fit: BudgetContext
) -> tuple[str, list[int], bool]:
    """(the summary, its token ids, whether it was trained): written by the policy model in
    the episode's own conversation (its tokens are a generated turn), or by the settings'
    other engine. The request keeps room for the summary within the budget."""
    settings = fit.settings
    conversation = run.conversation
    assert conversation is not None
    ask = [{"role": "user", "content": settings.summary_prompt}]
    room = fit.budget - settings.summary_tokens
    if conversation.prompt_length(messages + ask) > room:
        fewer = _fewer_turns(conversation, messages + ask, room, settings.keep_turns)
        messages = fewer[:-1]
    request = messages + ask
    sampling = dataclasses.replace(fit.sampling, max_tokens=settings.summary_tokens)
    if fit.sampling_seed is not None:
        sampling = dataclasses.replace(
            sampling, seed=request_seed(fit.sampling_seed, run.index, f"summary-{turn}")
        )
    try:
        if settings.kind.summary_by == "other":
            output = await settings.summary_engine.generate(messages=request, sampling=sampling)
            return (output.text or "").strip(), list(output.completion_ids), False
        prompt_ids = list(conversation.prompt_ids(request))
        output = await dispatch.generate(
            run.index, {"sampling": sampling, "tools": run.agent.tools, "prompt_ids": prompt_ids}
        )
    except Exception as exc:
        raise ModelFailure(f"the summary request failed: {type(exc).__name__}: {exc}") from exc
    ids = list(output.completion_ids) or encode(fit.tokenizer, output.text)
    conversation.add_completion(ids, list(output.logprobs) or None)
    run.prompt_tokens += len(prompt_ids)
    run.completion_tokens += len(ids)
    text = output.text or fit.tokenizer.decode(ids, skip_special_tokens=True)
    return text.strip(), ids, True
