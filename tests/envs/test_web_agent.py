"""`WebAgent` on rllm/Web-v0: its prompt teaches the grammar, its replies drive the real env,
and the execution engine runs it with the real local engine (tiny model)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from rllm_agents.agents import WebAgent, agent_for_env
from rllm_agents.types import TerminationReason
from rllm_envs.web.actions import VERBS

from tests.agents.conftest import tiny_engine  # noqa: F401 - the shared real-model fixture
from tests.envs.web_support import require_web


def test_web_agent_is_registered_and_teaches_every_verb():
    assert agent_for_env("rllm/Web-v0") is WebAgent
    for verb in VERBS:
        assert f"{verb}(" in WebAgent.system_prompt
    agent = WebAgent()
    agent.update_from_env({"text": "URL: x", "screenshot": None}, 0.0, False, {})
    assert agent.chat_completions[-1] == {"role": "user", "content": "URL: x"}


def test_web_agent_replies_with_prose_drive_the_env_to_a_win():
    require_web()
    from rllm_envs.web.solver import find_ref

    env = gym.make("rllm/Web-v0")
    agent = WebAgent()
    try:
        observation, info = env.reset(options={"task": {"family": "login", "seed": 4}})
        agent.update_from_env(observation, 0.0, False, info)
        user, password = info["goal"].split('"')[1], info["goal"].split('"')[3]
        plan = [
            ("textbox", "Username", f'I type the user name.\nfill({{ref}}, "{user}")'),
            ("textbox", "Password", f"Now the password: `fill({{ref}}, '{password}')`"),
            ("button", "Log in", "<think>submit</think>Submitting with click({ref})."),
        ]
        for role, name, reply in plan:
            text = agent.chat_completions[-1]["content"]
            action = agent.update_from_model(reply.format(ref=find_ref(text, role, name))).action
            observation, reward, terminated, truncated, info = env.step(action)
            agent.update_from_env(observation, reward, terminated or truncated, info)
        assert terminated and reward == 1.0 and agent.trajectory.reward == 1.0
        assert len(agent.trajectory.steps) == 3
    finally:
        env.close()


@pytest.mark.slow
def test_execution_engine_runs_web_agent_with_the_local_engine(tiny_engine):  # noqa: F811
    require_web()
    from rllm_agents.engines.base import SamplingParams
    from rllm_agents.execution import AgentExecutionEngine

    engine = AgentExecutionEngine(
        WebAgent,
        lambda: gym.make("rllm/Web-v0"),
        tiny_engine,
        tokenizer=tiny_engine.tokenizer,
        n_parallel=2,
        max_turns=2,
        sampling=SamplingParams(temperature=1.0, max_tokens=16, seed=None),
        progress=False,
    )
    tasks = [{"family": "login", "seed": 0}, {"family": "table_cell", "seed": 1}]
    episodes = engine.run(tasks=tasks)
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.termination_reason in {
            TerminationReason.MAX_TURNS,
            TerminationReason.ENV_DONE,
        }
        steps = episode.trajectories[0].steps
        assert 1 <= len(steps) <= 2 and "failure" not in steps[-1].info
