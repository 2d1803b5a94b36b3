"""What ``rllm-eval`` reports: the summary it writes (scores, rates, the run's settings as it
ran them) and the table it prints, and whether infrastructure failures fail the run."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rllm_agents.engines.slots import serving_slots


def run_summary(
    args: argparse.Namespace,
    episodes: list[Any],
    *,
    resumed: int,
    runner: Any,
    engine: Any,
    decided: dict[str, Any],
    started_at: float,
) -> dict[str, Any]:
    """The summary of a finished run: the scores of `episodes` (`resumed` of them kept from an
    earlier run), the runner's rates, and ``config``: the command's options with what the run
    `decided` itself (the engine it chose, the episodes it ran at once) in place of the
    defaults they left open, never the API key."""
    from rllm_agents.metrics import summarize_episodes

    summary = summarize_episodes(episodes, samples_per_task=args.n)
    for key in ("wall_time", "episodes_per_s", "completion_tokens_per_s"):
        summary[key] = runner.last_metrics.get(key)
    summary["resumed_episodes"] = resumed
    summary["serving_slots"] = serving_slots(engine)
    if args.agent_program or args.agent_cmd:
        from rllm_agents.programs import failure_counts

        summary["program_failures"] = failure_counts(episodes)
    options = {**vars(args), **decided}
    summary["config"] = {
        key: str(value) if isinstance(value, Path) else value
        for key, value in options.items()
        if key != "api_key"
    }
    # Wall-clock stamps of the evaluation proper (imports before it and the table after
    # it excluded), comparable with stamps taken by other processes.
    summary["started_at"], summary["finished_at"] = started_at, time.time()
    return summary


def failure_rate_exceeded(summary: dict[str, Any], max_rate: float) -> bool:
    """Whether more episodes failed for infrastructure than `max_rate` of them allows."""
    failed, total = summary.get("infra_failures", 0), summary.get("episodes", 0)
    return bool(total) and failed > 0 and failed / total > max_rate


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"rllm-eval {summary['config']['env']} · {summary['config']['model']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    shown = ["tasks", "episodes", "mean_reward", "accuracy"]
    shown += [key for key in summary if key.startswith("pass@")]
    shown += ["scored_episodes", "infra_failures", "errors", "env_failures"]
    shown += ["completion_tokens_per_s", "wall_time"]
    for key in shown:
        value = summary.get(key)
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    reasons = ", ".join(f"{k}={v}" for k, v in summary["termination_reasons"].items())
    table.add_row("termination", reasons)
    outcomes = ", ".join(f"{k}={v}" for k, v in summary.get("outcomes", {}).items())
    table.add_row("outcomes", outcomes)
    if summary.get("invalid_action_share") is not None:
        table.add_row("invalid actions", f"{summary['invalid_action_share']:.1%} of steps")
    if summary.get("infra_failures"):
        max_rate = summary["config"].get("max_failure_rate", 0.0)
        verdict = "exit 1" if failure_rate_exceeded(summary, max_rate) else "allowed"
        table.caption = (
            f"{summary['infra_failures']} of {summary['episodes']} episodes failed for "
            f"infrastructure and are not scored ({verdict}, --max-failure-rate {max_rate})"
        )
    Console().print(table)
