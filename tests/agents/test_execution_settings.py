"""AgentExecutionEngine's settings in groups (limits, scheduling, output, recording): the grouped
and the flat form make the same engine, bad settings are refused when it is made, and a run
follows each group. The model is the loopback OpenAI-compatible server."""

from __future__ import annotations

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.agents import FrozenLakeAgent, TextAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.execution.settings import EpisodeLimits, Recording, RunOutput, Scheduling
from rllm_agents.testing.fault_server import FaultServer
from rllm_agents.types import Episode, TerminationReason


def lake():
    return gym.make("rllm/FrozenLake-v0")


def settings_of(engine: AgentExecutionEngine) -> tuple:
    return engine.limits, engine.scheduling, engine.output, engine.recording


def test_the_grouped_and_the_flat_form_make_the_same_engine(tmp_path):
    grouped = AgentExecutionEngine(
        FrozenLakeAgent,
        lake,
        None,
        limits=EpisodeLimits(max_turns=3, max_response_tokens=64, trajectory_timeout=30.0),
        scheduling=Scheduling(n_parallel=2, dispatch="lockstep", sampling_seed=7),
        output=RunOutput(output_path=tmp_path / "e.jsonl", progress=False),
        recording=Recording(record_env=False, policy={"name": "m"}),
    )
    flat = AgentExecutionEngine(
        FrozenLakeAgent, lake, None, max_turns=3, max_response_tokens=64,
        trajectory_timeout=30.0, n_parallel=2, dispatch="lockstep", sampling_seed=7,
        output_path=str(tmp_path / "e.jsonl"), progress=False, record_env=False,
        policy={"name": "m"},
    )  # fmt: skip
    assert settings_of(grouped) == settings_of(flat)
    # A setting given on its own is laid over its group.
    mixed = AgentExecutionEngine(
        FrozenLakeAgent, lake, None, limits=EpisodeLimits(max_turns=3), max_turns=5
    )
    assert mixed.limits == EpisodeLimits(max_turns=5)
    assert AgentExecutionEngine(FrozenLakeAgent, lake, None).output.output_path is None


@pytest.mark.parametrize(
    "settings, error, words",
    [
        ({"n_paralel": 4}, TypeError, "unknown settings ['n_paralel']"),
        ({"n_parallel": 0}, ValueError, "n_parallel must be at least 1"),
        ({"max_turns": 0}, ValueError, "max_turns must be at least 1"),
        ({"dispatch": "sync"}, ValueError, "sync"),
        ({"env_calls": "fork"}, ValueError, "fork"),
        ({"limits": Scheduling()}, TypeError, "limits= takes a EpisodeLimits, not Scheduling"),
        ({"executor": "slurm"}, ValueError, "executor must be one of"),
        ({"limits": EpisodeLimits(), "scheduling": {"n_parallel": 2}}, TypeError, "Scheduling"),
    ],
)
def test_bad_settings_are_refused_when_the_engine_is_made(settings, error, words):
    with pytest.raises(error) as caught:
        AgentExecutionEngine(FrozenLakeAgent, lake, None, **settings)
    assert words in str(caught.value)


def test_the_keyword_form_needs_its_classes_and_no_factories():
    with pytest.raises(TypeError, match="needs both agent_class and env_class"):
        AgentExecutionEngine(sampling_params={"model": "m"})  # it used to be ignored
    with pytest.raises(TypeError, match="not both"):
        AgentExecutionEngine(FrozenLakeAgent, lake, agent_class=TextAgent, env_class=lake)


async def test_a_run_follows_each_group(tmp_path):
    log = tmp_path / "episodes.jsonl"
    with FaultServer(completion="Staying put: `Left`", latency_s=0.05) as server:
        model = OpenAIEngine(server.base_url, "canned")
        try:
            engine = AgentExecutionEngine(
                FrozenLakeAgent,
                lake,
                model,
                sampling=SamplingParams(max_tokens=8),
                limits=EpisodeLimits(max_turns=2),
                scheduling=Scheduling(n_parallel=2),
                output=RunOutput(output_path=log, progress=False),
                recording=Recording(record_env=False, policy={"name": "canned"}),
            )
            episodes = await engine.execute_seeds(range(5))
        finally:
            await model.aclose()
        in_flight = server.stats.max_in_flight
    assert in_flight == 2  # scheduling: two episodes at once, never more
    for episode in episodes:
        assert episode.termination_reason == TerminationReason.MAX_TURNS  # limits
        assert len(episode.trajectories[0].steps) == 2
        assert episode.env is None and episode.policy == {"name": "canned"}  # recording
    written = [Episode.from_json(line) for line in log.read_text().splitlines()]  # output
    assert sorted(e.id for e in written) == sorted(e.id for e in episodes)
