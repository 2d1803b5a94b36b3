"""The judge reward: its parser on written replies, the judge on real engines (the tiny model,
whose replies never parse, and SmolLM2 on llama.cpp, whose constrained replies do), and the
Gymnasium wrapper on real envs."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401 - registers the rllm/* ids
from rllm_agents.agents import TextAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.llamacpp.server import free_port
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.rewards import (
    Judge,
    JudgePrompt,
    JudgeReward,
    JudgeSettings,
    Turn,
    episode_transcript,
    parse_scores,
)
from rllm_agents.types import Episode, Step, Trajectory

FRUIT = "Name a fruit that is yellow."
REPLIES = ["A banana.", "A tomato is red.", "Lemon.", "I like cars."]


def group_of(replies: list[str], task: str = FRUIT) -> list[tuple[Turn, ...]]:
    return [(Turn("task", task), Turn("agent", reply)) for reply in replies]


# -- the parser ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "count", "scores"),
    [
        ('{"score": 7}', 1, [0.7]),
        ('Sure! {"scores": [10, 0, 5]} Hope that helps.', 3, [1.0, 0.0, 0.5]),
        ('{"scores": ["8", 2.5]}', 2, [0.8, 0.25]),  # numbers written as text, halves
        ("[3, 9]", 2, [0.3, 0.9]),  # a bare list
        # Objects with ids are placed by id, whatever their order.
        ('{"scores": [{"id": 2, "score": 1}, {"id": 1, "score": 9}]}', 2, [0.9, 0.1]),
        ('{"scores": {"1": 4, "2": "6/10"}}', 2, [0.4, 0.6]),
        # The answer after the thinking counts, not a draft inside it.
        ('<think>maybe {"score": 1}</think>{"score": 9}', 1, [0.9]),
        # The last JSON value holding scores wins (a draft, then the answer).
        ('draft {"scores": [1, 1]} final {"scores": [6, 4]}', 2, [0.6, 0.4]),
        ("<score>7</score>", 1, [0.7]),
        ("first <score>2</score> second <score> 8 </score>", 2, [0.2, 0.8]),
        ('<score id="2">3</score><score id="1">10</score>', 2, [1.0, 0.3]),
    ],
)
def test_parser_reads_json_and_tagged_scores(reply, count, scores):
    parsed = parse_scores(reply, count, scale=10)
    assert parsed.failure is None
    assert parsed.scores == pytest.approx(scores)
    assert parsed.with_default(0.5) == pytest.approx(scores)


@pytest.mark.parametrize(
    ("reply", "count", "failure"),
    [
        ("The first one is better.", 2, "no JSON scores"),
        ("", 1, "no JSON scores"),
        ('{"verdict": "good"}', 1, "no JSON scores"),
        ('{"scores": [7, 3]}', 3, "expected 3 scores, found 2"),
        ("<score>1</score>", 2, "expected 2 scores, found 1"),
        ('<think>{"score": 7}', 1, "no JSON scores"),  # an answer never given
    ],
)
def test_a_reply_without_usable_scores_is_a_parse_failure(reply, count, failure):
    parsed = parse_scores(reply, count, scale=10)
    assert failure in parsed.failure
    assert parsed.scores == (None,) * count
    assert parsed.unknown == count
    assert parsed.with_default(0.25) == [0.25] * count


def test_out_of_range_scores_are_clipped_or_refused_and_non_numbers_are_unknown():
    reply = '{"scores": [12, -1, 5, "great", NaN]}'
    clipped = parse_scores(reply, 5, scale=10, out_of_range="clip")
    assert clipped.scores == (1.0, 0.0, 0.5, None, None)
    assert clipped.raw[:3] == (12.0, -1.0, 5.0)
    assert clipped.clipped == 2
    assert "score 4 is not a number" in clipped.failure
    refused = parse_scores(reply, 5, scale=10, out_of_range="refuse")
    assert refused.scores == (None, None, 0.5, None, None)
    assert refused.clipped == 0
    assert "score 1 (12) is outside 0..10" in refused.failure
    assert refused.with_default(0.1) == pytest.approx([0.1, 0.1, 0.5, 0.1, 0.1])


def test_parser_refuses_bad_arguments():
    with pytest.raises(ValueError, match="count"):
        parse_scores("{}", 0, scale=10)
    with pytest.raises(ValueError, match="out_of_range"):
        parse_scores("{}", 1, scale=10, out_of_range="wrap")


# -- prompts and settings -----------------------------------------------------------------------


def test_group_prompt_shows_the_shared_task_once_and_every_transcript_in_order():
    messages = JudgePrompt().messages(group_of(REPLIES), "Names a yellow fruit.", 10, 2000)
    system, user = messages[0]["content"], messages[1]["content"]
    assert "Names a yellow fruit." in system and "0" in system and "10" in system
    assert user.count(FRUIT) == 1
    positions = [
        user.index(f'<transcript id="{i}">\n[agent] {r}') for i, r in enumerate(REPLIES, 1)
    ]
    assert positions == sorted(positions)
    assert "exactly 4 whole numbers" in user


def test_transcripts_of_an_episode_and_long_turns_are_cut_in_the_middle():
    steps = [
        Step(observation="Go north or south?", model_response="north"),
        Step(observation="x" * 500 + "END", model_response="south"),
    ]
    episode = Episode(id="e", trajectories=[Trajectory(steps=steps)])
    turns = episode_transcript(episode)
    assert [turn.role for turn in turns] == ["task", "agent", "env", "agent"]
    user = JudgePrompt().messages([turns], "r", 10, max_chars=100)[1]["content"]
    assert "characters cut" in user and "END" in user and "x" * 200 not in user
    # A step recorded from an agent program's calls has no observation: its last user message.
    program_step = Step(
        model_response="42",
        chat_completions=[
            {"role": "user", "content": "What is 6 x 7?"},
            {"role": "assistant", "content": "42"},
        ],
    )
    program = Episode(trajectories=[Trajectory(steps=[program_step])])
    assert episode_transcript(program) == (Turn("task", "What is 6 x 7?"), Turn("agent", "42"))


def test_prompt_templates_and_settings_are_checked_before_any_call(tmp_path):
    with pytest.raises(ValueError, match=r"uses \{answer\}"):
        JudgePrompt(pointwise="Score {transcript}; compare with {answer}")
    template = tmp_path / "prompt.yaml"
    template.write_text("system: 'Be harsh. Rubric: {rubric}. Scale 0-{scale}.'\n")
    prompt = JudgePrompt.from_file(template)
    assert prompt.system.startswith("Be harsh") and prompt.group == JudgePrompt().group
    template.write_text("sytem: typo\n")
    with pytest.raises(ValueError, match="some of system, pointwise, group"):
        JudgePrompt.from_file(template)
    with pytest.raises(ValueError, match="rubric"):
        JudgeSettings(rubric="  ")
    with pytest.raises(ValueError, match="default_score"):
        JudgeSettings(default_score=2.0)
    with pytest.raises(ValueError, match="constrain"):
        JudgeSettings(constrain="regex")


# -- the judge on real engines ------------------------------------------------------------------


def test_tiny_model_replies_fail_to_parse_take_the_default_and_are_logged(tiny_engine, tmp_path):
    """The tiny random model writes no scores: every call is a counted parse failure whose
    scores take the default; nothing raises, and the log holds prompt, reply and reason."""
    from rllm_agents.rewards import JudgeLog

    settings = JudgeSettings(rubric="Names a yellow fruit.", default_score=0.25, max_tokens=12)
    judge = Judge(tiny_engine, settings)  # the session's engine: not the judge's to close
    log = JudgeLog(tmp_path / "judge.jsonl")
    try:
        group = judge.run(judge.score(group_of(REPLIES), label="fruit"))
        single = judge.run(judge.score(group_of(REPLIES[:1])))
    finally:
        judge.close()
    for call, count in ((group, 4), (single, 1)):
        log.write(call)
        assert call.mode == ("group" if count > 1 else "pointwise")
        assert call.reply  # the model did answer ...
        assert call.parse_failure is not None  # ... with no scores in it
        assert call.scores == [0.25] * count
        assert call.defaulted == list(range(count))
        assert call.error is None and call.seconds > 0
    lines = [json.loads(line) for line in (tmp_path / "judge.jsonl").read_text().splitlines()]
    assert [line["mode"] for line in lines] == ["group", "pointwise"]
    assert lines[0]["label"] == "fruit"
    assert "Names a yellow fruit." in lines[0]["messages"][0]["content"]
    assert all(reply in lines[0]["messages"][1]["content"] for reply in REPLIES)
    assert lines[0]["reply"] == group.reply and lines[0]["parse_failure"] == group.parse_failure


@pytest.fixture
def smollm2_judge(llamacpp_server):
    """SmolLM2 on the shared llama.cpp server as a judge, its replies held to the JSON shape."""
    engine = OpenAIEngine(llamacpp_server.base_url, llamacpp_server.model_alias)
    judge = Judge(engine, JudgeSettings(rubric="The reply names a yellow fruit."), owns_engine=True)
    yield judge
    judge.close()


@pytest.mark.slow
@pytest.mark.llamacpp
def test_smollm2_on_llamacpp_scores_a_group_in_a_reply_that_parses(smollm2_judge):
    """(Pointwise replies are checked by the wrapper tests below.)"""
    call = smollm2_judge.run(smollm2_judge.score(group_of(REPLIES)))
    assert call.mode == "group"
    assert call.parse_failure is None, call.reply
    assert call.defaulted == []
    assert len(call.scores) == 4
    assert all(0.0 <= score <= 1.0 for score in call.scores)
    # Whole numbers 0..10 as the schema asks, divided by the scale.
    assert [raw / 10 for raw in call.raw_scores] == pytest.approx(call.scores)
    assert all(float(raw).is_integer() for raw in call.raw_scores)


# -- the Gymnasium wrapper ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.llamacpp
def test_wrapper_withholds_env_rewards_and_ends_with_the_judges_score(smollm2_judge, tmp_path):
    """CartPole pays 1 a step (3 steps here): with replace, every step returns 0 and the last
    one the score."""
    log_path = tmp_path / "judge.jsonl"
    env = JudgeReward(
        gym.make("rllm/GymText-v0", env_id="CartPole-v1", max_episode_steps=3),
        smollm2_judge,
        weight=2.0,
        log_path=log_path,
    )
    assert env.metadata["rllm.inline_safe"] is False  # the judge's call blocks
    env.reset(seed=0)
    rewards, env_rewards, done, info = [], [], False, {}
    while not done:
        _, reward, terminated, truncated, info = env.step("0")
        rewards.append(reward)
        env_rewards.append(info["env_reward"])
        done = terminated or truncated
    env.close()
    assert env_rewards == [1.0, 1.0, 1.0]
    assert rewards[:-1] == [0.0] * (len(rewards) - 1)
    call = info["judge"]
    assert call["parse_failure"] is None, call["reply"]
    assert rewards[-1] == pytest.approx(2.0 * call["scores"][0])
    # The judge read the whole episode: the task, and every reply with the env's answer.
    transcript = call["messages"][1]["content"]
    assert "CartPole-v1" in transcript and transcript.count("[agent] 0") == len(rewards)
    [logged] = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert logged["reply"] == call["reply"] and logged["task_id"] == info["task_id"]


@pytest.mark.slow
@pytest.mark.llamacpp
def test_wrapper_adds_the_score_in_the_execution_engine(smollm2_judge, tiny_engine):
    """An episode of a graded env played by the execution engine (the wrapper's blocking step
    off its event loop): env reward + judge score."""

    def judged_arithmetic():
        return JudgeReward(gym.make("rllm/Arithmetic-v0"), smollm2_judge, use="add")

    engine = AgentExecutionEngine(
        TextAgent,
        judged_arithmetic,
        tiny_engine,
        max_turns=1,
        sampling=SamplingParams(max_tokens=8),
        progress=False,
    )
    [episode] = engine.run(seeds=[0])
    [step] = episode.trajectories[0].steps
    call = step.info["judge"]
    assert call["parse_failure"] is None, call["reply"]
    assert episode.reward == pytest.approx(step.info["env_reward"] + call["scores"][0])


def test_a_judge_whose_engine_fails_marks_the_episode_an_infrastructure_failure(tmp_path):
    dead = OpenAIEngine(f"http://127.0.0.1:{free_port()}/v1", "nobody", max_retries=0)
    judge = Judge(dead, owns_engine=True)
    env = JudgeReward(gym.make("rllm/OpenEnded-v0"), judge, log_path=tmp_path / "judge.jsonl")
    try:
        env.reset(seed=3)
        _, reward, terminated, _, info = env.step("A banana.")
    finally:
        env.close()
        judge.close()
    assert terminated and reward == 0.0
    assert info["failure"] == "judge"
    assert "connect" in info["judge"]["error"].lower()
    assert math.isclose(info["env_reward"], 0.0)
    assert json.loads((tmp_path / "judge.jsonl").read_text())["error"] == info["judge"]["error"]
