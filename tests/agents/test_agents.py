"""Built-in agents on real envs (no model: the replies are written by the test)."""

from __future__ import annotations

import gymnasium as gym
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.agents import (
    AGENTS,
    BaseAgent,
    FrozenLakeAgent,
    MathAgent,
    TextAgent,
    agent_for_env,
)
from rllm_agents.agents.registry import load_entry_point


def play(agent: BaseAgent, env, replies, seed=0):
    observation, info = env.reset(seed=seed)
    agent.reset()
    agent.update_from_env(observation, 0.0, False, info)
    for reply in replies:
        action = agent.update_from_model(reply)
        observation, reward, terminated, truncated, info = env.step(action.action)
        agent.update_from_env(observation, reward, terminated or truncated, info)
        if terminated or truncated:
            break
    return agent


def test_frozenlake_agent_plays_the_real_env():
    env = gym.make("rllm/FrozenLake-v0", tasks=[{"map": ["SF", "FG"], "task_id": "t"}])
    agent = play(FrozenLakeAgent(), env, ["I go `Right`.", "<think>down</think> `Down`"])
    trajectory = agent.trajectory
    assert [step.action for step in trajectory.steps] == [
        "I go `Right`.",
        "<think>down</think> `Down`",
    ]
    assert trajectory.reward == 1.0 and trajectory.steps[-1].done
    assert trajectory.steps[-1].info["is_correct"] is True
    assert trajectory.steps[1].thought == "down"
    messages = trajectory.steps[1].chat_completions
    assert messages[0]["role"] == "system" and "frozen lake" in messages[0]["content"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user", "assistant"]
    env.close()


def test_math_agent_can_drop_earlier_thinking():
    rows = [{"question": "What is 2 + 3?", "answer": "5", "id": "q"}]
    replies = ["<think>2+3=6</think> \\boxed{6}", "<think>recheck</think> \\boxed{5}"]
    for keep_thinking, expected in ((True, True), (False, False)):
        env = gym.make("rllm/Math-v0", tasks=rows, max_turns=2)
        agent = play(MathAgent(keep_thinking=keep_thinking), env, replies)
        assert agent.trajectory.reward == 1.0
        history = agent.trajectory.steps[-1].chat_completions
        assert ("2+3=6" in history[2]["content"]) is expected
        assert "\\boxed{6}" in history[2]["content"]
        env.close()


def test_text_agent_plays_gymtext_and_bounds_history():
    env = gym.make("rllm/GymText-v0", env_id="CartPole-v1")
    agent = play(TextAgent(max_history_turns=2), env, ["`0`", "1", "nonsense", "`1`"])
    assert len(agent.trajectory.steps) == 4
    assert agent.trajectory.steps[2].info["action_valid"] is False
    user_turns = [m for m in agent.chat_completions if m["role"] == "user"]
    assert len(user_turns) == 2
    env.close()


def test_registry_resolves_every_entry_and_falls_back():
    for env_id, entry_point in AGENTS.items():
        assert issubclass(load_entry_point(entry_point), BaseAgent), env_id
    assert agent_for_env("rllm/FrozenLake-v0") is FrozenLakeAgent
    assert agent_for_env("rllm_envs:rllm/Math-v0") is MathAgent
    assert agent_for_env("CartPole-v1") is TextAgent
