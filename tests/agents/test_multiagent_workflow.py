"""`AgentWorkflowEngine` over the multi-agent envs: seats, policies, retries, metrics, tokens."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest
from rllm_agents.agents.opponents import scripted_move
from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution.multiagent import game_tasks, multiagent_engine
from rllm_agents.execution.policies import ModelPolicy, Response, ScriptedPolicy, SeatPlay
from rllm_agents.execution.seat_metrics import wilson_interval
from rllm_agents.types import Episode, TerminationReason
from rllm_envs.multiagent import (
    kuhn_poker_v0,
    referential_v0,
    tictactoe_v0,
)

from tests.parts import require_part


def scripted(name: str) -> ScriptedPolicy:
    return ScriptedPolicy(scripted_move(name), name=name)


def solver_judge():
    require_part(importlib.util.find_spec("math_verify") is not None, "needs rllm-envs[math]")
    from rllm_envs.multiagent import solver_judge_v0

    return solver_judge_v0


BOTH_SEATINGS = [
    {"player_0": "tictactoe_expert", "player_1": "random"},
    {"player_0": "random", "player_1": "tictactoe_expert"},
]


def test_an_expert_never_loses_to_random_and_the_metrics_say_so(tmp_path):
    engine = multiagent_engine(
        tictactoe_v0.parallel_env,
        {"tictactoe_expert": scripted("tictactoe_expert"), "random": scripted("random")},
        n_parallel=4,
        output_path=tmp_path / "episodes.jsonl",
        progress=False,
    )
    episodes = engine.run(game_tasks(range(60), seatings=BOTH_SEATINGS))
    assert len(episodes) == 60
    for episode in episodes:
        assert [t.name for t in episode.trajectories] == ["player_0", "player_1"]
        assert episode.termination_reason == TerminationReason.ENV_DONE
        expert = next(t for t in episode.trajectories if t.info["policy"] == "tictactoe_expert")
        assert expert.info["outcome"] in ("win", "draw") and expert.reward >= 0
        assert sum(t.reward for t in episode.trajectories) == 0.0  # zero-sum
        assert episode.info["seating"] == {t.name: t.info["policy"] for t in episode.trajectories}
    metrics = engine.last_metrics
    expert, rand = metrics["policies"]["tictactoe_expert"], metrics["policies"]["random"]
    assert expert["seats_played"] == rand["seats_played"] == 60
    assert expert["losses"] == 0 and expert["wins"] == rand["losses"] > 40
    assert expert["draws"] == rand["draws"]
    low, high = expert["win_rate_ci"]
    assert low < expert["win_rate"] < high
    assert metrics["seats"]["player_0"]["seats_played"] == 60
    assert metrics["failures"] == {} and metrics["retries"] == 0
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 60
    back = Episode.from_json(lines[0])
    assert back.trajectories[0].info["policy"] in ("tictactoe_expert", "random")


def test_the_seed_fixes_a_game_between_scripted_policies():
    def transcripts(seeds):
        engine = multiagent_engine(
            kuhn_poker_v0.parallel_env, {"random": scripted("random")}, progress=False
        )
        episodes = engine.run(game_tasks(seeds))
        return [
            [(t.name, [s.action for s in t.steps], t.reward) for t in e.trajectories]
            for e in episodes
        ]

    assert transcripts(range(20)) == transcripts(range(20))
    assert transcripts(range(20)) != transcripts(range(20, 40))


def test_an_unreadable_player_forfeits_and_is_counted():
    garbage = ScriptedPolicy(lambda observation, info, rng: "hmm, let me think", name="garbage")
    engine = multiagent_engine(
        tictactoe_v0.parallel_env,
        {"garbage": garbage, "random": scripted("random")},
        {"player_0": "random", "player_1": "garbage"},
        progress=False,
    )
    (episode,) = engine.run(game_tasks([0]))
    loser = episode.trajectories[1]
    assert (loser.reward, loser.info["outcome"], loser.info["invalid_moves"]) == (-1.5, "loss", 2)
    assert episode.trajectories[0].reward == 0.5
    assert "Invalid move" in loser.steps[1].observation["text"]
    assert engine.last_metrics["policies"]["garbage"]["forfeits"] == 1


class InFlight:
    """A scripted policy that answers after a pause and records how many answer at once."""

    def __init__(self, reply: str) -> None:
        self.name, self.trainable, self.reply = "slow", False, reply
        self.now = self.peak = 0

    def new_agent(self):
        from rllm_agents.agents.text_agent import TextAgent

        return TextAgent()

    def start(self, seat: SeatPlay) -> None:
        pass

    async def respond(self, seat: SeatPlay) -> Response:
        from rllm_agents.engines.base import ModelOutput

        self.now += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(0.05)
        self.now -= 1
        return Response(ModelOutput(text=self.reply))


def test_trajectories_group_by_task_and_role_for_training():
    from rllm_agents.execution import role_groups

    trained = ScriptedPolicy(scripted_move("random"), "learner", trainable=True)
    engine = multiagent_engine(
        kuhn_poker_v0.parallel_env,
        {"learner": trained, "random": scripted("random")},
        progress=False,
    )
    seatings = [{"player_0": "learner", "player_1": "random"}, {"*": "learner"}]
    episodes = engine.run(game_tasks(range(40), seatings=seatings))
    groups = role_groups(episodes)
    assert all(key.startswith("kuhn_poker/") for key in groups)
    for key, trajectories in groups.items():
        role = key.rsplit(":", 1)[1]
        assert all(t.info["role"] == role and t.info["trainable"] for t in trajectories)
    assert sum(map(len, groups.values())) == 20 * 1 + 20 * 2  # learner seats only
    everyone = role_groups(episodes, trainable_only=False)
    assert sum(map(len, everyone.values())) == 80


def test_the_solvers_of_one_game_answer_at_once():
    module = solver_judge()
    solvers = InFlight(r"\boxed{42}")
    engine = multiagent_engine(
        lambda: module.parallel_env(num_solvers=4),
        {"slow": solvers, "first": scripted("first")},
        {"judge_0": "first", "*": "slow"},
        n_parallel=1,
        progress=False,
    )
    task = {"question": "What is 6 times 7?", "answer": "42"}
    (episode,) = engine.run(game_tasks([0], task=task))
    assert solvers.peak == 4
    rewards = {t.name: t.reward for t in episode.trajectories}
    assert rewards == {
        "solver_0": 1.0,
        "solver_1": 1.0,
        "solver_2": 1.0,
        "solver_3": 1.0,
        "judge_0": 1.0,
    }
    assert episode.info["roles"]["judge_0"] == "judge" and episode.info["task_key"]
    roles = engine.last_metrics["roles"]
    assert roles["solver"]["seats_played"] == 4 and roles["judge"]["success_rate"] == 1.0


class Flaky:
    """Fails (or hangs) on player_0's first turn of the first attempt of up to `limit` games,
    then plays randomly."""

    def __init__(self, hang: bool = False, limit: int = 100) -> None:
        self.name, self.trainable, self.hang, self.limit = "flaky", False, hang, limit
        self.failed: set = set()

    def new_agent(self):
        from rllm_agents.agents.text_agent import TextAgent

        return TextAgent()

    def start(self, seat: SeatPlay) -> None:
        pass

    async def respond(self, seat: SeatPlay) -> Response:
        from rllm_agents.engines.base import ModelOutput

        # Before its first move a seat's generator is as the game's seed made it: it names
        # the game, and is the same again when the game is retried.
        game = str(seat.rng.bit_generator.state)
        first_turn = not seat.agent.trajectory.steps
        if seat.seat == "player_0" and first_turn and game not in self.failed:
            if len(self.failed) < self.limit:
                self.failed.add(game)
                if self.hang:
                    await asyncio.sleep(30)
                raise ConnectionError("server went away")
        return Response(ModelOutput(text=scripted_move("random")(None, seat.info, seat.rng)))


def test_a_failed_game_is_retried_and_its_errors_kept():
    engine = multiagent_engine(
        tictactoe_v0.parallel_env, {"flaky": Flaky()}, retry_limit=2, progress=False
    )
    episodes = engine.run(game_tasks([0, 1]))
    for episode in episodes:
        assert episode.termination_reason == TerminationReason.ENV_DONE
        assert episode.metrics["attempts"] == 2
        assert episode.info["attempt_errors"] == ["model: ConnectionError: server went away"]
    assert engine.last_metrics["retries"] == 2 and engine.last_metrics["failures"] == {}


def test_a_hung_game_times_out_and_is_retried():
    engine = multiagent_engine(
        tictactoe_v0.parallel_env,
        {"flaky": Flaky(hang=True)},
        retry_limit=1,
        timeout=0.5,
        progress=False,
    )
    (episode,) = engine.run(game_tasks([0]))
    assert episode.termination_reason == TerminationReason.ENV_DONE
    assert "timeout" in episode.info["attempt_errors"][0]


def test_failures_are_counted_by_kind_never_as_losses():
    engine = multiagent_engine(
        tictactoe_v0.parallel_env, {"flaky": Flaky(limit=2)}, retry_limit=0, progress=False
    )
    episodes = engine.run(game_tasks([0, 1, 2]))
    assert [e.termination_reason for e in episodes].count(TerminationReason.ERROR) == 2
    metrics = engine.last_metrics
    assert metrics["failures"] == {"error": 2}
    assert metrics["finished_episodes"] == 1 and metrics["seats"]["player_0"]["seats_played"] == 1
    failed = next(e for e in episodes if e.termination_reason == TerminationReason.ERROR)
    assert failed.error.startswith("model: ConnectionError") and failed.trajectories


class BreaksOnce:
    """A tic-tac-toe env whose first instance raises in its first step (a crashing env)."""

    made = 0

    def __init__(self) -> None:
        BreaksOnce.made += 1
        self.env, self.broken = tictactoe_v0.parallel_env(), BreaksOnce.made == 1
        self.metadata = self.env.metadata

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions):
        if self.broken:
            raise RuntimeError("segfault in the game engine")
        return self.env.step(actions)


def test_an_env_that_raises_is_replaced_and_the_game_retried():
    BreaksOnce.made = 0
    engine = multiagent_engine(BreaksOnce, {"random": scripted("random")}, progress=False)
    (episode,) = engine.run(game_tasks([0]))
    assert episode.termination_reason == TerminationReason.ENV_DONE
    assert episode.info["attempt_errors"] == ["env: RuntimeError: segfault in the game engine"]
    assert BreaksOnce.made == 2


class Counted:
    """A tic-tac-toe env that counts how many of its kind are made and closed."""

    made = closed = 0

    def __init__(self) -> None:
        Counted.made += 1
        self.env = tictactoe_v0.parallel_env()
        self.metadata = {**self.env.metadata, "rllm.inline_safe": False}  # on worker threads

    def __getattr__(self, name):
        return getattr(self.env, name)

    def close(self) -> None:
        Counted.closed += 1
        self.env.close()


def test_envs_are_reused_across_games_and_closed_after_the_run():
    Counted.made = Counted.closed = 0
    engine = multiagent_engine(
        Counted, {"random": scripted("random")}, n_parallel=3, progress=False
    )
    engine.run(game_tasks(range(12)))
    assert 1 <= Counted.made <= 3 and Counted.closed == Counted.made
    engine.run(game_tasks(range(4)))  # a second run makes its own pool
    assert Counted.closed == Counted.made


@pytest.mark.slow
def test_an_env_failure_ends_the_game_and_is_not_retried():
    module = solver_judge()
    hanging = ScriptedPolicy(lambda o, i, r: r"\boxed{9^{9^{9^{9}}}}", name="hanging")
    engine = multiagent_engine(
        lambda: module.parallel_env(num_solvers=1, grading_timeout_s=1.0),
        {"hanging": hanging},
        progress=False,
    )
    (episode,) = engine.run(game_tasks([0], task={"question": "q", "answer": "x^2"}))
    assert episode.termination_reason == TerminationReason.ENV_FAILURE
    assert episode.failure == "grader" and episode.metrics["attempts"] == 1
    assert engine.last_metrics["failures"] == {"env_failure:grader": 1}


def test_unknown_policies_are_refused_up_front():
    with pytest.raises(ValueError, match="unknown policies"):
        multiagent_engine(tictactoe_v0.parallel_env, {"random": scripted("random")}, {"*": "gpt"})


def test_wilson_interval_matches_known_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


# -- real models --------------------------------------------------------------------------------
def test_a_model_seat_is_rendered_token_in_token_out(tiny_engine):
    model = ModelPolicy(
        tiny_engine,
        name="tiny",
        tokenizer=tiny_engine.tokenizer,
        sampling=SamplingParams(max_tokens=6, temperature=1.0),
    )
    engine = multiagent_engine(
        tictactoe_v0.parallel_env,
        {"tiny": model, "random": scripted("random")},
        {"player_0": "random", "player_1": "tiny"},
        progress=False,
    )
    episodes = engine.run(game_tasks(range(3)))
    for episode in episodes:
        random_seat, model_seat = episode.trajectories
        assert model_seat.info["trainable"] and not random_seat.info["trainable"]
        assert model_seat.info["prefix_consistent"] is True
        sequence = model_seat.prompt_ids + model_seat.response_ids
        generated = [step.response_ids for step in model_seat.steps]
        assert sum(model_seat.response_mask) == sum(map(len, generated)) > 0
        assert len(model_seat.response_logprobs) == len(model_seat.response_ids)
        for step in model_seat.steps:  # every prompt the model saw is a prefix of the sequence
            assert sequence[: len(step.prompt_ids)] == step.prompt_ids
            end = len(step.prompt_ids) + len(step.response_ids)
            assert sequence[len(step.prompt_ids) : end] == step.response_ids
            assert len(step.logprobs) == len(step.response_ids)
        assert random_seat.prompt_ids == [] and random_seat.steps
        assert episode.metrics["completion_tokens"] == sum(map(len, generated))


def test_self_play_keeps_one_conversation_per_seat(tiny_engine):
    model = ModelPolicy(
        tiny_engine, tokenizer=tiny_engine.tokenizer, sampling=SamplingParams(max_tokens=4)
    )
    engine = multiagent_engine(
        lambda: referential_v0.parallel_env(rounds=2), {"model": model}, progress=False
    )
    (episode,) = engine.run(game_tasks([0]))
    speaker, listener = episode.trajectories
    assert speaker.info["policy"] == listener.info["policy"] == "model"
    assert len(speaker.steps) == len(listener.steps) == 2
    assert "You are the speaker" in speaker.steps[0].observation["text"]
    assert "You are the listener" in listener.steps[0].observation["text"]
    assert speaker.prompt_ids != listener.prompt_ids
    assert sum(speaker.response_mask) == sum(len(step.response_ids) for step in speaker.steps)
    assert episode.info["roles"] == {"speaker_0": "speaker", "listener_0": "listener"}


ENVS_WITH_SEATINGS = {
    # The random player moves first in turn-based games, so both seats play before the model
    # can forfeit.
    "tictactoe": (tictactoe_v0.parallel_env, {"player_0": "random", "player_1": "smollm2"}),
    "kuhn_poker": (kuhn_poker_v0.parallel_env, {"player_0": "random", "player_1": "smollm2"}),
    "referential": (
        lambda: referential_v0.parallel_env(rounds=1),
        {"speaker_0": "smollm2", "listener_0": "random"},
    ),
    "solver_judge": (None, {"solver_0": "smollm2", "solver_1": "smollm2", "judge_0": "random"}),
    "classic": (None, {"player_1": "random", "player_2": "smollm2"}),  # PettingZoo's names
}


@pytest.mark.slow
@pytest.mark.llamacpp
@pytest.mark.parametrize("name", list(ENVS_WITH_SEATINGS))
def test_smollm2_plays_every_env_against_a_random_policy(name, llamacpp_server):
    from rllm_agents.engines.openai import OpenAIEngine

    factory, seating = ENVS_WITH_SEATINGS[name]
    if name == "solver_judge":
        module = solver_judge()
        factory = module.parallel_env
    if name == "classic":
        require_part(importlib.util.find_spec("pygame") is not None, "needs rllm-envs[multiagent]")
        from rllm_envs.multiagent import classic_v0

        factory = lambda: classic_v0.parallel_env(game="tictactoe_v3")  # noqa: E731
    # Chat messages in, text out (token-level rendering is covered with the local engine).
    server = OpenAIEngine(llamacpp_server.base_url, "smollm2")
    model = ModelPolicy(
        server, name="smollm2", sampling=SamplingParams(max_tokens=16, temperature=0.7)
    )
    engine = multiagent_engine(
        factory, {"smollm2": model, "random": scripted("random")}, seating, progress=False
    )
    try:
        (episode,) = engine.run(game_tasks([0]))
    finally:
        asyncio.run(server.aclose())
    assert episode.termination_reason == TerminationReason.ENV_DONE, episode.error
    for trajectory in episode.trajectories:
        assert trajectory.steps, f"{trajectory.name} never played"
        if trajectory.info["policy"] == "smollm2":
            assert all(step.model_response for step in trajectory.steps)
            assert all(
                s.chat_completions[-1]["content"] == s.model_response for s in trajectory.steps
            )
        else:
            assert trajectory.info["invalid_moves"] == 0
    summary = json.loads(json.dumps(engine.last_metrics))
    assert set(summary["policies"]) == {"smollm2", "random"}
