"""One verl sample from one agent-program episode: which token sequence verl trains, and how.

A program's session becomes one or more token-exact sequences
(:func:`rllm_agents.gateway.build_sequences`): one when every call's prompt extends the last
call's prompt and completion (merged), several when the program or the chat template rewrote
history, or the program branched (split). verl 0.9.1's agent-loop worker takes exactly one
sequence per sample (``AgentLoopBase.run`` returns one ``AgentLoopOutput``, padded into one
row), so a split session gives up all but one:

**The split rule.** verl trains the sequence that holds the session's last model call - the
one that produced the answer the reward was given for - with the episode's reward on its last
token. The other sequences are dropped, never spliced onto it: a sequence is only ever tokens
the model saw in that order. How many were dropped, and how many generated tokens they held,
are recorded on the sample (``rllm_dropped_sequences``, ``rllm_dropped_tokens``).

A failed run (the program crashed, timed out, gave a bad result or made no model call; the
env's grader failed; the run raised) keeps whatever tokens it has, with an all-zero response
mask and reward 0, as the agent loop treats a failed episode: no gradient from a fake outcome.
A sequence whose first prompt does not fit verl's ``prompt_length`` fails the same way
(``prompt_too_long``): cutting its start would train on a prompt the model never saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rllm_agents.types import Episode, TerminationReason, Trajectory


@dataclass(frozen=True)
class SampleLimits:
    """verl's padded row: the prompt's and the response's token budgets."""

    prompt_length: int
    response_length: int


@dataclass
class ProgramSample:
    """The fields of one ``AgentLoopOutput`` (plain lists: built and tested without verl)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    reward: float
    model_calls: int  # the calls in the trained sequence
    extra: dict[str, Any] = field(default_factory=dict)


def last_call(trajectory: Trajectory) -> tuple[int, int]:
    """(call index, choice index) of the sequence's last call (build_sequences records them)."""
    return max(tuple(call) for call in trajectory.info.get("calls") or [[-1, -1]])


def trained_sequence(trajectories: list[Trajectory]) -> Trajectory | None:
    """The sequence verl trains: the one holding the session's last call (the split rule)."""
    return max(trajectories, key=last_call) if trajectories else None


def episode_failure(episode: Episode) -> str | None:
    """Why the episode must not be trained on, or None."""
    if episode.info.get("program_failure"):
        return str(episode.info["program_failure"])
    if episode.failure:
        return f"env: {episode.failure}"
    if episode.termination_reason in (TerminationReason.ERROR, TerminationReason.TIMEOUT):
        return episode.termination_reason.value
    return None


def placeholder_sample(token_id: int, failure: str, error: str | None) -> ProgramSample:
    """A masked one-token sample for a run that recorded no tokens (verl needs a row)."""
    return ProgramSample(
        [token_id], [token_id], [0], [0.0], 0.0, 0, sample_extra(failure=failure, error=error)
    )


def sample_extra(
    *,
    failure: str | None,
    error: str | None = None,
    termination: str = TerminationReason.ERROR.value,
    is_correct: bool | None = None,
    report: dict[str, Any] | None = None,
    dropped: tuple[Trajectory, ...] = (),
    truncated_tokens: int = 0,
) -> dict[str, Any]:
    """What verl keeps of the sample beside its tokens (its extra fields)."""
    report = report or {}
    counts = {
        "rllm_program_calls": int(report.get("calls", 0)),
        "rllm_sequences": int(report.get("sequences", 0)),
        "rllm_dropped_sequences": len(dropped),
        "rllm_dropped_tokens": sum(sum(t.response_mask) for t in dropped),
        "rllm_truncated_tokens": truncated_tokens,
        "rllm_failed": int(failure is not None),
    }
    return {
        # verl hands these numbers on per sample (rollout dumps, validation's val-aux metrics):
        # the one path from an agent loop to what the trainer reports.
        "reward_extra_info": dict(counts),
        **counts,
        "turn_scores": [],
        "tool_rewards": [],
        "rllm_termination": termination,
        "rllm_failure": failure,
        "rllm_error": error,
        "rllm_is_correct": is_correct,
        "rllm_split_reasons": dict(report.get("split_reasons", {})),
    }


def program_sample(episode: Episode, limits: SampleLimits, placeholder_id: int) -> ProgramSample:
    """The sample verl trains from one program episode (see the module docstring)."""
    failure = episode_failure(episode)
    chosen = trained_sequence([t for t in episode.trajectories if t.response_ids])
    if chosen is None:
        return placeholder_sample(placeholder_id, failure or "no_tokens", episode.error)
    prompt = list(chosen.prompt_ids)
    if len(prompt) > limits.prompt_length:
        failure = failure or "prompt_too_long"
        prompt = prompt[-limits.prompt_length :]  # masked below: only the row's shape needs it
    response = list(chosen.response_ids)
    mask = [int(value) for value in chosen.response_mask]
    logprobs = [float(value) for value in chosen.response_logprobs]
    cut = limits.response_length
    truncated = sum(mask[cut:])  # generated tokens past verl's budget: not trained
    response, mask, logprobs = response[:cut], mask[:cut], logprobs[:cut]
    if failure is not None:
        mask = [0] * len(mask)
    extra = sample_extra(
        failure=failure,
        error=episode.error,
        termination=(episode.termination_reason or TerminationReason.ENV_DONE).value,
        is_correct=episode.is_correct,
        report=episode.info.get("sequences"),
        dropped=tuple(t for t in episode.trajectories if t is not chosen),
        truncated_tokens=truncated,
    )
    reward = 0.0 if failure is not None else float(chosen.reward or 0.0)
    return ProgramSample(prompt, response, mask, logprobs, reward, len(chosen.steps), extra)
