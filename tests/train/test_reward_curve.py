"""The reward curve a run saves: validation drawn where it was measured, and how each curve's
episodes were sampled."""

from __future__ import annotations

import json

from matplotlib import pyplot
from rllm_train.run import reporting


def rows() -> list[dict]:
    return [
        {"step": 0, "val/reward_mean": 0.25},
        *({"step": step, "reward_mean": 0.1 * step} for step in range(1, 5)),
        {"step": 4, "val/reward_mean": 0.75},
    ]


def test_validation_is_points_and_labels_say_how_each_was_sampled():
    figure = reporting.reward_figure(rows(), temperatures=(1.0, 0.0))
    try:
        train, validation = figure.axes[0].get_lines()
        assert train.get_label() == "train reward (sampled, T=1)"
        assert list(train.get_xdata()) == [1, 2, 3, 4]
        assert validation.get_label() == "validation reward (greedy)"
        assert list(validation.get_xdata()) == [0, 4]
        assert validation.get_linestyle() == "None"  # two measurements, no line between them
    finally:
        pyplot.close(figure)
    sampled = reporting.sampling_label("validation reward", 0.6)
    assert sampled == "validation reward (sampled, T=0.6)"


def test_the_png_is_written_from_the_metrics_file(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    png = reporting.plot_reward_curve(metrics, tmp_path / "curve.png", temperatures=(1.0, 0.0))
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert reporting.plot_reward_curve(tmp_path / "none.jsonl", tmp_path / "x.png") is None
