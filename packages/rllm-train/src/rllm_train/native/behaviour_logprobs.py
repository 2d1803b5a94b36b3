"""The rollout engine's log-prob of each generated token (the behaviour policy's), per sequence.

Rollout correction compares these with the trainer's log-probs of the same tokens, so each must
sit at its token's position, and a token the engine gave no log-prob for must be known as such:
``None`` here, never a number. A trajectory's ``response_logprobs`` cannot say it - the
token-in/token-out conversation writes 0.0 both for env tokens and for model tokens whose engine
reported nothing, and 0.0 is also a real log-prob (a token the tempered softmax gives all of its
mass in float32) - so the values are taken from the turns (``Step.logprobs``, one per
``Step.response_ids`` token, or empty), whose completions are the trajectory's model tokens.
"""

from __future__ import annotations

from rllm_agents.types import Step, TokenSequence, Trajectory

TokenLogprobs = list[float | None]  # one per token; None: the engine reported none


def step_logprobs(step: Step) -> TokenLogprobs:
    """The engine's log-prob of each of the turn's completion tokens, None for all of them when
    it reported none (or a list of another length, which cannot be placed)."""
    if step.response_ids and len(step.logprobs) == len(step.response_ids):
        return [float(value) for value in step.logprobs]
    return [None] * len(step.response_ids)


def trajectory_logprobs(trajectory: Trajectory) -> TokenLogprobs:
    """One entry per token of ``trajectory.response_ids``: the engine's log-prob on the model
    tokens it can be placed on, None on env/template tokens and on model tokens it cannot.

    The model tokens (``response_mask`` 1) are the completions of the last turns, in order (a
    gateway sequence that branched holds its earlier turns in the prompt), so turns are matched
    from the end by their token ids. Matching stops at the first turn whose ids are not there -
    a text-only engine's reply tokenised again, a turn cut short - and every model token before
    it stays None: a log-prob is never guessed onto a token.
    """
    return placed_logprobs(trajectory.response_ids, trajectory.response_mask, trajectory.steps)


def sequence_logprobs(sequence: TokenSequence, steps: list[Step]) -> TokenLogprobs:
    """:func:`trajectory_logprobs` for one of a trajectory's sequences: its turns are some of
    the trajectory's, so the turns after its last one (later sequences') are passed over."""
    return placed_logprobs(
        sequence.response_ids, sequence.response_mask, steps, skip_later_turns=True
    )


def placed_logprobs(
    response_ids: list[int],
    response_mask: list[int],
    steps: list[Step],
    *,
    skip_later_turns: bool = False,
) -> TokenLogprobs:
    positions = [index for index, flag in enumerate(response_mask) if flag]
    model_ids = [response_ids[index] for index in positions]
    found: TokenLogprobs = [None] * len(model_ids)
    end = len(model_ids)
    for step in reversed(steps):
        ids = list(step.response_ids)
        start = end - len(ids)
        if start < 0 or model_ids[start:end] != ids:
            if skip_later_turns and end == len(model_ids):
                continue  # not this sequence's last turn yet
            break
        found[start:end] = step_logprobs(step)
        end = start
        if end == 0:
            break
    placed: TokenLogprobs = [None] * len(response_ids)
    for index, value in zip(positions, found, strict=True):
        placed[index] = value
    return placed


# The info key (of a Step or a Trajectory) an asynchronous sampler sets: how many updates the
# weights that generated the tokens had had. Samples without it are taken to be from the
# weights of the step that trains on them.
POLICY_VERSION = "policy_version"


def step_version(step: Step, trajectory: Trajectory) -> int | None:
    """The policy version of one turn: its own, else its trajectory's, else None (unknown)."""
    version = step.info.get(POLICY_VERSION, trajectory.info.get(POLICY_VERSION))
    return None if version is None else int(version)


def trajectory_version(trajectory: Trajectory) -> int | None:
    """The policy version of a whole trajectory: that of its oldest turn (a partial rollout
    carried over an update mixes versions, and its staleness is its stalest token's)."""
    versions = [step_version(step, trajectory) for step in trajectory.steps]
    known = [version for version in versions if version is not None]
    if known:
        return min(known)
    version = trajectory.info.get(POLICY_VERSION)
    return None if version is None else int(version)
