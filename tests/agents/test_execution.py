"""The execution engine with the real local engine (tiny model) on real envs."""

from __future__ import annotations

import asyncio
import json
import time

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.agents import FrozenLakeAgent, MathAgent, TextAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.execution.env_slot import INLINE_SAFE_KEY
from rllm_agents.types import Episode, TerminationReason

pytestmark = pytest.mark.slow  # each test samples from the tiny model (seconds)

SHORT = SamplingParams(temperature=1.0, max_tokens=12, seed=None)


def frozenlake_engine(tiny_engine, **kwargs):
    options = {
        "n_parallel": 4,
        "max_turns": 3,
        "sampling": SHORT,
        "tokenizer": tiny_engine.tokenizer,
        "progress": False,
    }
    options.update(kwargs)
    return AgentExecutionEngine(
        FrozenLakeAgent, lambda: gym.make("rllm/FrozenLake-v0"), tiny_engine, **options
    )


def test_every_seed_gives_one_episode_in_order_with_tokens(tiny_engine, tmp_path):
    output = tmp_path / "episodes.jsonl"
    engine = frozenlake_engine(tiny_engine, output_path=output)
    episodes = engine.run(seeds=list(range(4)))
    assert [episode.info["seed"] for episode in episodes] == list(range(4))
    for episode in episodes:
        assert episode.termination_reason in {
            TerminationReason.MAX_TURNS,
            TerminationReason.ENV_DONE,
        }
        trajectory = episode.trajectories[0]
        assert 1 <= len(trajectory.steps) <= 3
        assert trajectory.info["prefix_consistent"]
        assert len(trajectory.response_ids) == len(trajectory.response_mask)
        assert len(trajectory.response_logprobs) == len(trajectory.response_ids)
        generated = [
            t for t, m in zip(trajectory.response_ids, trajectory.response_mask, strict=True) if m
        ]
        assert generated == [t for step in trajectory.steps for t in step.response_ids]
        # Every turn's prompt is a prefix of the whole sequence.
        whole = trajectory.prompt_ids + trajectory.response_ids
        for step in trajectory.steps:
            assert whole[: len(step.prompt_ids)] == step.prompt_ids
        assert episode.metrics["llm_time"] > 0
    lines = output.read_text().splitlines()
    assert sorted(Episode.from_json(line).id for line in lines) == sorted(e.id for e in episodes)
    metrics = engine.last_metrics
    assert metrics["episodes"] == 4 and metrics["completion_tokens_per_s"] > 0


def test_episode_json_round_trip(tiny_engine):
    (episode,) = frozenlake_engine(tiny_engine).run(seeds=[3])
    again = Episode.from_json(json.dumps(episode.to_dict()))
    assert again.to_dict() == episode.to_dict()
    assert again.termination_reason == episode.termination_reason


def test_task_rows_are_passed_to_reset(tiny_engine):
    rows = [{"map": ["SF", "FG"], "task_id": "tiny-lake"}]
    (episode,) = frozenlake_engine(tiny_engine, max_turns=1).run(tasks=rows)
    assert episode.task == rows[0]
    assert episode.id.startswith("tiny-lake")
    assert "P F" in episode.trajectories[0].steps[0].observation


def test_response_budget_is_shared_across_turns(tiny_engine):
    # Greedy: a sampled reply that re-tokenizes differently would split the trajectory into
    # segments, each with a budget of its own (Conversation.response_length), and the episodes
    # here would differ from run to run.
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    engine = frozenlake_engine(tiny_engine, max_turns=8, max_response_tokens=30, sampling=greedy)
    for episode in engine.run(seeds=[0, 1, 2]):
        trajectory = episode.trajectories[0]
        assert trajectory.info["prefix_consistent"]
        # The budget counts model and env tokens after the first prompt; the last env turn
        # may cross it, no model turn starts beyond it.
        assert sum(trajectory.response_mask) <= 30
        last_prompt = trajectory.steps[-1].prompt_ids
        assert len(last_prompt) - len(trajectory.prompt_ids) < 30
        if episode.termination_reason != TerminationReason.ENV_DONE:
            assert episode.termination_reason == TerminationReason.RESPONSE_TOO_LONG


async def test_a_conversation_beyond_the_context_ends_as_prompt_too_long(llamacpp_server):
    """The server refuses a prompt longer than its context (n_ctx 2048): the episode ends as
    prompt_too_long and is scored, not counted as an infrastructure error."""
    from rllm_agents.engines.openai import OpenAIEngine

    engine = OpenAIEngine(llamacpp_server.base_url, "smollm2", max_retries=0)
    runner = AgentExecutionEngine(
        lambda: TextAgent(system_prompt="Think. " * 1200),  # about 2400 tokens
        lambda: gym.make("rllm/FrozenLake-v0"),
        engine,
        max_turns=1,
        sampling=SamplingParams(max_tokens=4),
        progress=False,
    )
    try:
        (episode,) = await runner.execute_seeds([0])
    finally:
        await engine.aclose()
    assert episode.termination_reason == TerminationReason.PROMPT_TOO_LONG
    assert episode.error is None


def test_prompt_budget(tiny_engine):
    engine = frozenlake_engine(tiny_engine, max_prompt_tokens=10)
    (episode,) = engine.run(seeds=[0])
    assert episode.termination_reason == TerminationReason.PROMPT_TOO_LONG
    assert episode.trajectories[0].steps == []


def test_engine_errors_become_error_episodes(tmp_path):
    from rllm_agents.engines.local import LocalEngine

    closed = LocalEngine.from_name("tiny")
    closed.close()  # a real engine that now refuses every request
    engine = AgentExecutionEngine(
        TextAgent, lambda: gym.make("rllm/FrozenLake-v0"), closed, progress=False
    )
    episodes = engine.run(seeds=[0, 1, 2])
    assert [e.termination_reason for e in episodes] == [TerminationReason.ERROR] * 3
    assert all("closed" in e.error for e in episodes)


class ExplodingEnv(gym.Wrapper):
    """A real env whose step raises on odd seeds (an env bug, not an infrastructure failure)."""

    def reset(self, *, seed=None, options=None):
        self._explode = bool(seed % 2)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self._explode:
            raise RuntimeError("env bug")
        return self.env.step(action)


def test_env_exceptions_end_only_their_episode(tiny_engine):
    engine = frozenlake_engine(tiny_engine, n_parallel=2, max_turns=1)
    engine.env_factory = lambda: ExplodingEnv(gym.make("rllm/FrozenLake-v0"))
    episodes = engine.run(seeds=[0, 1, 2, 3])
    reasons = [e.termination_reason for e in episodes]
    assert reasons[1] == reasons[3] == TerminationReason.ERROR
    assert "env bug" in episodes[1].error
    assert reasons[0] != TerminationReason.ERROR and reasons[2] != TerminationReason.ERROR


def test_thread_affine_env_stays_on_one_thread(tiny_engine):
    import threading

    class ThreadCheckingEnv(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.home = threading.get_ident()
            # Thread-bound, unlike the FrozenLake inside: withdraw its inline-safe declaration.
            self.metadata = {**env.metadata, INLINE_SAFE_KEY: False}

        def step(self, action):
            assert threading.get_ident() == self.home, "env used from another thread"
            return self.env.step(action)

        def reset(self, **kwargs):
            assert threading.get_ident() == self.home, "env used from another thread"
            return self.env.reset(**kwargs)

    engine = frozenlake_engine(tiny_engine, n_parallel=3, max_turns=2)
    engine.env_factory = lambda: ThreadCheckingEnv(gym.make("rllm/FrozenLake-v0"))
    episodes = engine.run(seeds=list(range(6)))
    assert all(e.termination_reason != TerminationReason.ERROR for e in episodes)


@pytest.mark.parametrize(
    ("env_id", "agent", "kwargs"),
    [
        ("rllm/Math-v0", MathAgent, {}),
        ("rllm/GymText-v0", TextAgent, {"env_id": "CartPole-v1"}),
    ],
)
def test_other_envs(tiny_engine, env_id, agent, kwargs):
    engine = AgentExecutionEngine(
        agent,
        lambda: gym.make(env_id, **kwargs),
        tiny_engine,
        tokenizer=tiny_engine.tokenizer,
        max_turns=2,
        sampling=SHORT,
        progress=False,
    )
    episodes = asyncio.run(engine.execute_seeds([0, 1]))
    assert len(episodes) == 2
    assert all(e.termination_reason != TerminationReason.ERROR for e in episodes), [
        e.error for e in episodes
    ]


def test_timed_out_episode_frees_its_local_engine_slot():
    """A trajectory timeout cancels the model request, which leaves the batch at once."""
    from rllm_agents.engines.local import LocalEngine

    local = LocalEngine.from_name("tiny", max_batch_size=4)
    try:
        engine = frozenlake_engine(
            local,
            n_parallel=2,
            trajectory_timeout=0.5,
            sampling=SamplingParams(temperature=1.0, max_tokens=6000),
        )
        episodes = engine.run(seeds=[0, 1])
        assert [e.termination_reason for e in episodes] == [TerminationReason.TIMEOUT] * 2
        deadline = time.monotonic() + 5
        while local.stats.cancelled < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert local.stats.cancelled == 2
        generated = local.stats.generated_tokens
        time.sleep(0.3)
        assert local.stats.generated_tokens == generated  # nothing decodes for them any more
    finally:
        local.close()
