"""Context compaction in the execution engine, on the tiny model and FrozenLake 8x8 with a small
context budget: episodes many times the budget complete, each compaction starts a new token
sequence, every generated token is in exactly one sequence (a policy-written summary among them,
another engine's never), and a compacted episode replays identically."""

from __future__ import annotations

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.agents import FrozenLakeAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.episodes import read_episodes, replay_episodes
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.execution.compaction import (
    CompactionSettings,
    ContextView,
    drop_tool_outputs,
    keep_last_turns,
    policy_kind,
)
from rllm_agents.types import TerminationReason

BUDGET = 600
MAX_TOKENS = 10
TURNS = 40
SAMPLING = SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS)


def lake_engine(engine, compaction: CompactionSettings, **options) -> AgentExecutionEngine:
    return AgentExecutionEngine(
        FrozenLakeAgent,
        lambda: gym.make("rllm/FrozenLake-v0", size=8, max_turns=TURNS),
        engine,
        tokenizer=engine.tokenizer,
        n_parallel=2,
        max_turns=TURNS,
        max_context_tokens=BUDGET,
        sampling=SAMPLING,
        progress=False,
        compaction=compaction,
        **options,
    )


def model_tokens(sequence) -> list[int]:
    return [t for t, m in zip(sequence.response_ids, sequence.response_mask, strict=True) if m]


def check_sequences(episode) -> tuple[list[int], list[int]]:
    """(the generated tokens of the episode's sequences in order, its turns' own), after
    checking that every prompt fit the budget."""
    trajectory = episode.trajectories[0]
    assert trajectory.info["prefix_consistent"] is False
    assert len(trajectory.sequences) == trajectory.info["token_segments"] >= 2
    for sequence in trajectory.sequences:
        assert len(sequence.response_mask) == len(sequence.response_ids)
        assert len(sequence.prompt_ids) <= BUDGET
    for step in trajectory.steps:
        assert len(step.prompt_ids) <= BUDGET  # what the model saw, each turn
    generated = [t for sequence in trajectory.sequences for t in model_tokens(sequence)]
    turns = [t for step in trajectory.steps for t in step.response_ids]
    return generated, turns


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["last_turns", "drop_tool_outputs"])
def test_a_rewrite_compacts_an_episode_ten_times_its_budget(tiny_engine, policy):
    engine = lake_engine(tiny_engine, CompactionSettings(policy=policy, keep_turns=2))
    for episode in engine.run(seeds=[0, 1]):
        assert episode.termination_reason == TerminationReason.ENV_TRUNCATED  # all 40 turns
        generated, turns = check_sequences(episode)
        assert generated == turns  # every generated token trained once, in order
        trajectory = episode.trajectories[0]
        played = sum(len(s.prompt_ids) + len(s.response_ids) for s in trajectory.sequences)
        assert sum(len(step.prompt_ids) for step in trajectory.steps) >= 10 * BUDGET
        assert played < sum(len(step.prompt_ids) for step in trajectory.steps)
        records = trajectory.info["compactions"]
        assert len(records) == episode.metrics["compactions"] == len(trajectory.sequences) - 1
        for record in records:
            assert record["policy"] == policy and record["summary"] is None
            assert record["tokens_after"] <= 0.75 * BUDGET < record["tokens_before"]


@pytest.mark.slow
def test_without_compaction_the_episode_ends_at_the_budget(tiny_engine):
    (episode,) = lake_engine(tiny_engine, CompactionSettings()).run(seeds=[0])
    assert episode.termination_reason == TerminationReason.PROMPT_TOO_LONG
    assert len(episode.trajectories[0].steps) < TURNS and episode.metrics["compactions"] == 0


@pytest.mark.slow
def test_a_summary_by_the_policy_is_trained_and_by_another_engine_is_not(tiny_engine):
    own = CompactionSettings(policy="summarize", summary_tokens=24)
    (episode,) = lake_engine(tiny_engine, own).run(seeds=[2])
    generated, turns = check_sequences(episode)
    records = episode.trajectories[0].info["compactions"]
    assert records and all(r["summary_trained"] for r in records)
    # The policy's summaries are generated tokens of the sequences, besides its turns'.
    assert len(generated) == len(turns) + sum(r["summary_tokens"] for r in records)
    other = CompactionSettings(
        policy="summarize_with", summary_tokens=24, summary_engine=tiny_engine
    )
    (episode,) = lake_engine(tiny_engine, other).run(seeds=[2])
    generated, turns = check_sequences(episode)
    records = episode.trajectories[0].info["compactions"]
    assert records and not any(r["summary_trained"] for r in records)
    assert generated == turns  # the other engine's summaries are context only


@pytest.mark.slow
def test_a_compacted_episode_replays_identically(tiny_engine, tmp_path):
    output = tmp_path / "episodes.jsonl"
    engine = lake_engine(tiny_engine, CompactionSettings(policy="last_turns"), output_path=output)
    engine.run(seeds=[3])
    [episode] = read_episodes(output)
    assert episode.metrics["compactions"] > 0 and episode.trajectories[0].sequences
    [result] = replay_episodes([episode])
    assert result.identical and result.steps == len(episode.trajectories[0].steps)


# -- the policies themselves (pure functions) ------------------------------------------------
TASK = [{"role": "system", "content": "S"}, {"role": "user", "content": "the task"}]


def conversation(turns: int, output: str = "x" * 500) -> list[dict]:
    messages = list(TASK)
    for turn in range(turns):
        messages += [
            {"role": "assistant", "content": f"move {turn}"},
            {"role": "user", "content": f"{turn}:{output}"},
        ]
    return messages


def test_last_turns_keeps_the_task_a_note_and_the_recent_turns():
    kept = keep_last_turns(conversation(5), 2)
    assert kept[:2] == TASK and "3 earlier turns removed" in kept[2]["content"]
    assert [m["content"] for m in kept[3:] if m["role"] == "assistant"] == ["move 3", "move 4"]
    assert keep_last_turns(conversation(2), 2) is None  # nothing older to remove


def test_drop_tool_outputs_cuts_older_outputs_only():
    settings = CompactionSettings(policy="drop_tool_outputs", keep_turns=1, keep_chars=40)
    cut = drop_tool_outputs(conversation(3), settings)
    outputs = [m["content"] for m in cut if m["role"] == "user"][1:]
    assert all("characters removed" in text and len(text) < 100 for text in outputs[:2])
    assert outputs[2] == conversation(3)[-1]["content"]  # the last turn is whole
    assert drop_tool_outputs(conversation(3, output="short"), settings) is None


def test_a_context_view_replaces_the_start_of_the_history():
    history = conversation(4)
    view = ContextView(anchor=len(history), head=keep_last_turns(history, 1))
    later = history + [{"role": "assistant", "content": "move 4"}]
    assert view.messages(later)[-1] == later[-1]
    assert view.messages(later)[: len(view.head)] == view.head


def test_policies_are_checked_by_name():
    assert policy_kind("summarize").summary_by == "policy"
    assert policy_kind("tests.agents.test_compaction:keep_first_two").rewrite is keep_first_two
    with pytest.raises(ValueError, match="unknown compaction policy 'forget'"):
        CompactionSettings(policy="forget")
    with pytest.raises(ValueError, match="summary_engine"):
        CompactionSettings(policy="summarize_with")
    with pytest.raises(ValueError, match="target"):
        CompactionSettings(policy="last_turns", target=2.0)


def keep_first_two(messages, settings):
    """A user's own policy (named by 'module:function' in the tests above)."""
    return messages[:2]
