"""Episodes as JSON: every value becomes a plain JSON type, and the record reads back equal."""

from __future__ import annotations

import json

import numpy as np
from rllm_agents.types import Episode, Step, TerminationReason, Trajectory


def test_odd_values_become_plain_json_and_round_trip():
    step = Step(
        observation=np.array([[1, 2], [3, 4]]),
        action=("Left", 0),
        reward=np.float32(0.5),
        info={1: {"tags": {"a"}}, "reason": TerminationReason.TIMEOUT},
        response_ids=[5, 6, 7],
        logprobs=[-0.25, -1.0, -0.5],
    )
    trajectory = Trajectory(steps=[step], reward=1.0, response_mask=[1, 1, 0])
    episode = Episode(
        id="t:0",
        termination_reason=TerminationReason.ENV_DONE,
        trajectories=[trajectory],
        metrics={"turns": 1.0},
        info={"seed": np.int64(3)},
    )
    data = episode.to_dict()
    assert json.loads(json.dumps(data)) == data  # nothing json would change or refuse
    assert data["termination_reason"] == "env_done"
    assert list(data) == ["id", "task", "termination_reason", "trajectories", "is_correct",
                          "failure", "error", "metrics", "info", "env", "policy", "timings",
                          "format_version"]  # fmt: skip
    written = data["trajectories"][0]["steps"][0]
    assert written["observation"] == [[1, 2], [3, 4]]
    assert written["action"] == ["Left", 0]
    assert written["reward"] == 0.5
    assert written["info"] == {"1": {"tags": ["a"]}, "reason": "timeout"}
    assert data["info"]["seed"] == 3
    again = Episode.from_json(episode.to_json())
    assert again.to_dict() == data
    assert again.termination_reason is TerminationReason.ENV_DONE
    assert again.trajectories[0].steps[0].response_ids == [5, 6, 7]
