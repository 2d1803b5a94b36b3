"""Progress of a run's episodes where stderr is no terminal: plain periodic lines."""

from __future__ import annotations

import io

from rllm_agents.execution.progress import RewardProgress, elapsed_text


def test_without_a_terminal_progress_is_periodic_lines_and_a_last_one():
    stream = io.StringIO()  # no terminal
    with RewardProgress(3, "rllm/Math-v0", stream=stream, line_interval_s=0) as progress:
        for reward in (1.0, 0.0, 0.5):
            progress.advance(reward)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("rllm/Math-v0: 1/3 episodes, mean reward 1.000, ")
    assert lines[2].startswith("rllm/Math-v0: 3/3 episodes, mean reward 0.500, ")
    assert lines[-1].startswith("rllm/Math-v0: 3/3 episodes")  # where it ended


def test_lines_wait_for_their_interval_and_can_be_turned_off():
    quiet = io.StringIO()
    with RewardProgress(2, "run", stream=quiet, line_interval_s=3600) as progress:
        progress.advance(1.0)
        progress.advance(1.0)
    (only,) = quiet.getvalue().splitlines()  # the last line alone
    assert only.startswith("run: 2/2 episodes, mean reward 1.000, ")
    off = io.StringIO()
    with RewardProgress(2, "run", enabled=False, stream=off, line_interval_s=0) as progress:
        progress.advance(1.0)
    assert off.getvalue() == ""
    assert (elapsed_text(59.9), elapsed_text(61)) == ("59s", "1m01s")
