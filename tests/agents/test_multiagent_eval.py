"""`rllm-eval` on multi-agent envs: seats, opponents, the win-rate summary and bad input."""

from __future__ import annotations

import json

import pytest
from rllm_agents.cli import eval as rllm_eval
from rllm_agents.cli import eval_multiagent
from rllm_agents.types import Episode


def run(tmp_path, *argv: str) -> tuple[dict, list[Episode]]:
    """Through `rllm-eval`'s own entry point, which hands multi-agent env modules on."""
    out = tmp_path / "run"
    code = rllm_eval.main([*argv, "--output", str(out), "--no-progress"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    lines = (out / "episodes.jsonl").read_text().splitlines()  # written as games finish
    episodes = sorted(map(Episode.from_json, lines), key=lambda episode: episode.info["seed"])
    return summary, episodes


def test_the_model_alternates_seats_against_the_named_opponent(tmp_path, capsys):
    argv = ["--env", "tictactoe_v0", "--model", "tiny", "--opponent", "random"]
    summary, episodes = run(tmp_path, *argv, "--num-games", "4", "--max-tokens", "6")
    assert [e.info["seating"] for e in episodes] == [
        {"player_0": "model", "player_1": "random"},
        {"player_0": "random", "player_1": "model"},
    ] * 2
    model = summary["policies"]["model"]
    assert model["seats_played"] == 4 and model["wins"] + model["draws"] + model["losses"] == 4
    low, high = model["win_rate_ci"]
    assert 0.0 <= low <= model["win_rate"] <= high <= 1.0
    assert summary["games"] == 4 and summary["seats_of_env"] == ["player_0", "player_1"]
    assert summary["config"]["opponent"] == "random"
    printed = capsys.readouterr().out
    assert "tiny vs random: win rate" in printed and "(95% Wilson)" in printed


def test_a_fixed_seat_and_self_play(tmp_path):
    argv = ["--env", "rllm_envs.multiagent.kuhn_poker_v0", "--model", "tiny", "--max-tokens", "4"]
    _, episodes = run(tmp_path, *argv, "--num-games", "2", "--seat", "1")
    assert {json.dumps(e.info["seating"]) for e in episodes} == {
        json.dumps({"player_0": "random", "player_1": "model"})
    }
    argv = ["--env", "referential_v0", "--env-kwargs", '{"rounds": 1}', "--model", "tiny"]
    argv += ["--max-tokens", "4"]
    summary, episodes = run(tmp_path, *argv, "--opponent", "self", "--num-games", "2")
    assert set(summary["policies"]) == {"model"}
    assert all(set(e.info["seating"].values()) == {"model"} for e in episodes)
    assert "success_rate_ci" in summary["roles"]["listener"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--opponent", "grandmaster"], "--opponent 'grandmaster' is unknown"),
        (["--seat", "player_9"], "--seat 'player_9' is not a seat of this env"),
        (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
        (["--num-games", "0"], "must be at least 1"),
    ],
)
def test_bad_input_is_one_clear_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        rllm_eval.main(["--env", "tictactoe_v0", "--model", "tiny", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_multiagent_envs_are_told_apart_from_gymnasium_ids():
    assert eval_multiagent.requested(["--env", "tictactoe_v0"])
    assert eval_multiagent.requested(
        ["--model", "x", "--env", "rllm_envs.multiagent.referential_v0"]
    )
    assert not eval_multiagent.requested(["--env", "rllm/Math-v0"])
    assert not eval_multiagent.requested(["--env", "FrozenLake-v1"])
    assert not eval_multiagent.requested(["--env", "json.decoder"])  # a module, not an env
    assert not eval_multiagent.requested(["--model", "tiny"])


@pytest.mark.slow
@pytest.mark.llamacpp
def test_smollm2_against_random_through_a_server(tmp_path, llamacpp_server):
    argv = ["--env", "kuhn_poker_v0", "--base-url", llamacpp_server.base_url, "--model", "smollm2"]
    summary, episodes = run(
        tmp_path, *argv, "--num-games", "2", "--max-tokens", "16", "--parallel", "1"
    )
    assert len(episodes) == 2 and summary["failures"] == {}
    assert all(e.trajectories and e.info["outcomes"] for e in episodes)
    assert summary["policies"]["model"]["seats_played"] == 2
