"""The verl sample of an agent-program episode (the split rule, failures, verl's budgets) and
the engine that puts verl's rollout servers behind the gateway - without verl or a model."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from rllm_agents.engines.base import PromptRejected, SamplingParams
from rllm_agents.types import Episode, TerminationReason, Trajectory
from rllm_train.verl.program_engine import ServerManagerEngine
from rllm_train.verl.program_output import SampleLimits, program_sample
from rllm_train.verl.program_ref import ProgramRef

LIMITS = SampleLimits(prompt_length=8, response_length=6)
PAD = 0


def sequence(prompt, response, mask, calls, reward=1.0) -> Trajectory:
    return Trajectory(
        prompt_ids=prompt,
        response_ids=response,
        response_mask=mask,
        response_logprobs=[-0.5 * m for m in mask],
        reward=reward,
        info={"calls": calls},
    )


def episode(*trajectories, **changes) -> Episode:
    fields = {
        "id": "e",
        "task": {},
        "termination_reason": TerminationReason.ENV_DONE,
        "trajectories": list(trajectories),
        "info": {"sequences": {"calls": 3, "sequences": len(trajectories)}},
    }
    return Episode(**{**fields, **changes})


def test_a_merged_session_is_trained_as_it_is():
    merged = sequence([1, 2], [3, 4, 5, 6], [1, 0, 0, 1], [[0, 0], [1, 0]], reward=0.75)
    sample = program_sample(episode(merged), LIMITS, PAD)
    assert (sample.prompt_ids, sample.response_ids) == ([1, 2], [3, 4, 5, 6])
    assert sample.response_mask == [1, 0, 0, 1] and sample.reward == 0.75
    assert sample.response_logprobs == [-0.5, 0.0, 0.0, -0.5]
    assert sample.extra["rllm_failure"] is None and sample.extra["rllm_dropped_sequences"] == 0
    # The counts verl hands on to validation metrics and rollout dumps.
    assert sample.extra["reward_extra_info"]["rllm_sequences"] == 1


def test_a_split_session_trains_the_sequence_of_the_last_call_and_counts_the_rest():
    longer_but_earlier = sequence([1, 2], [3, 4, 5, 6], [1, 1, 1, 1], [[0, 0], [1, 0]])
    last = sequence([7], [8], [1], [[2, 0]])
    sample = program_sample(episode(longer_but_earlier, last), LIMITS, PAD)
    assert (sample.prompt_ids, sample.response_ids, sample.model_calls) == ([7], [8], 0)
    assert sample.extra["rllm_dropped_sequences"] == 1
    assert sample.extra["rllm_dropped_tokens"] == 4


@pytest.mark.parametrize(
    "changes, failure",
    [
        ({"info": {"program_failure": "crashed"}}, "crashed"),
        ({"failure": "sandbox_died"}, "env: sandbox_died"),
        ({"termination_reason": TerminationReason.TIMEOUT}, "timeout"),
    ],
)
def test_a_failed_run_keeps_its_tokens_without_loss_or_reward(changes, failure):
    sample = program_sample(episode(sequence([1], [2, 3], [1, 1], [[0, 0]]), **changes), LIMITS, 0)
    assert sample.response_ids == [2, 3] and sample.response_mask == [0, 0]
    assert sample.reward == 0.0 and sample.extra["rllm_failure"] == failure


def test_a_run_without_tokens_is_one_masked_placeholder():
    sample = program_sample(episode(info={"program_failure": "no_model_calls"}), LIMITS, PAD)
    assert (sample.prompt_ids, sample.response_ids, sample.response_mask) == ([0], [0], [0])
    assert sample.extra["rllm_failure"] == "no_model_calls"
    # A scored run whose calls had no token ids carries its score on a token-less trajectory.
    scored = Trajectory(reward=1.0, info={"untokenized_calls": 1})
    sample = program_sample(episode(scored), LIMITS, PAD)
    assert (sample.prompt_ids, sample.response_mask, sample.reward) == ([0], [0], 0.0)
    assert sample.extra["rllm_failure"] == "no_tokens"


def test_verls_budgets_fail_a_long_prompt_and_cut_a_long_response():
    long_prompt = sequence(list(range(10)), [1], [1], [[0, 0]])
    sample = program_sample(episode(long_prompt), LIMITS, PAD)
    assert len(sample.prompt_ids) == 8 and sample.response_mask == [0]
    assert sample.extra["rllm_failure"] == "prompt_too_long" and sample.reward == 0.0
    long_response = sequence([1], list(range(9)), [1] * 9, [[0, 0]])
    sample = program_sample(episode(long_response), LIMITS, PAD)
    assert len(sample.response_ids) == 6 and sample.extra["rllm_truncated_tokens"] == 3
    assert sample.reward == 1.0


def test_program_rows_round_trip_and_resolve_files_against_the_trainers_directory(tmp_path):
    ref = ProgramRef(function="agents/a.py:run", cwd=str(tmp_path), timeout_s=5.0, retries=0)
    assert ProgramRef.from_json(ref.to_json()) == ref and ProgramRef.from_json("") is None
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents/a.py").write_text("def run(task, base_url, api_key):\n    return 1.0\n")
    assert ref.load().function.__code__.co_filename == str(tmp_path / "agents/a.py")
    with pytest.raises(ValueError, match="exactly one"):
        ProgramRef(function="m:f", command="ls")


@dataclass
class TokenOutput:
    token_ids: list[int]
    log_probs: list[float] | None


@dataclass
class FakeServerManager:
    """verl's server manager: returns `reply` and remembers what it was asked.

    The real one lives only inside a verl run, where tests/train/test_verl_program.py drives
    the adapter through it; here each edge of the translation (EOS vs length, refusals) is
    reached on purpose, which a real run does not do on demand.
    """

    reply: TokenOutput
    calls: list[dict] = field(default_factory=list)

    async def generate(self, *, request_id, prompt_ids, sampling_params):
        self.calls.append({"prompt_ids": prompt_ids, **sampling_params})
        return self.reply


class Tokenizer:
    eos_token_id = 9

    def decode(self, ids, **_):
        return " ".join(str(token) for token in ids)


def generate(reply: TokenOutput, **sampling):
    manager = FakeServerManager(reply)
    engine = ServerManagerEngine(manager, Tokenizer(), top_k=-1)
    output = asyncio.run(engine.generate(prompt_ids=[1, 2], sampling=SamplingParams(**sampling)))
    return output, manager.calls


def test_the_engine_sends_token_ids_and_returns_the_servers_tokens_and_logprobs():
    output, [call] = generate(TokenOutput([5, 9], [-0.1, -0.2]), temperature=0.7, max_tokens=4)
    assert call["prompt_ids"] == [1, 2] and call["temperature"] == 0.7 and call["max_tokens"] == 4
    assert output.completion_ids == [5, 9] and output.logprobs == [-0.1, -0.2]
    assert output.text == "5" and output.finish_reason == "stop"  # EOS ends it, not in the text
    output, _ = generate(TokenOutput([5, 6], [-0.1, -0.2]), max_tokens=2)
    assert output.finish_reason == "length"


def test_the_engine_refuses_what_verls_servers_cannot_do():
    with pytest.raises(PromptRejected, match="stop sequences"):
        generate(TokenOutput([5], [-0.1]), stop=("\n",))
    with pytest.raises(Exception, match="log-probs"):
        generate(TokenOutput([5], None))
