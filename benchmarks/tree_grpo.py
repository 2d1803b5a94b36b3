"""Advantage variance of tree-structured GRPO against plain GRPO, same policy, same tasks.

    python benchmarks/tree_grpo.py [--groups 48] [--k 8] [--reference 24] [--branch-turns 1,2,4]
                                   [--policies random,noisy-expert] [--plot docs/...png]

Both sides play FrozenLake through the native trainer's own samplers - plain GRPO through
``ExecutionSampler`` (``k`` episodes of a task from its reset), tree GRPO through
``TreeSampler`` (a trunk to its branch turn, then ``k`` continuations of its snapshot; one
tree side per value of ``--branch-turns``) - on
the same task seeds, with the same policy, on rllm-agents' execution engine. For every group
it reports, side by side:

* the advantage variance: the variance of ``r - mean(group)`` (GRPO's advantage before its
  division by the group's std), averaged over groups;
* the baseline error: ``(mean of the k returns - V)^2``, where V is the value of the state the
  group starts from, estimated from ``--reference`` further episodes started from that same
  state (further branches of the same snapshot; further resets for plain GRPO), averaged over
  groups; it includes V's own estimation noise, the same on both sides;
* how many groups are informative (not all k returns equal: GRPO learns nothing from the
  others) and, for the tree, how many branched mid-episode (a trunk that fell into a hole
  before its branch turn branches from the reset instead).

Two seeded scripted policies are measured by default, served as rollout engines so that they
go through exactly the code path a model does (agent, chat template, token-level
conversation, env wrappers) - a transformer on the shared 2-core CPU would take far longer than
the 3 minutes this takes:

* ``random``: each reply a move in backticks, Down and Right 35 % each, Left and Up 15 % (an
  untrained policy: it rarely reaches the goal);
* ``noisy-expert``: reads the board in its prompt and takes the first move of the shortest path
  to the goal 70 % of the time, a uniformly random move otherwise (a partly trained policy).

``--policies smollm2`` (or ``tiny``) samples from that model instead (use a GPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import rllm_envs  # noqa: F401  (registers the rllm/ ids)
from rllm_agents.agents.frozenlake_agent import FrozenLakeAgent
from rllm_agents.engines.base import ModelOutput, SamplingParams
from rllm_envs.frozenlake.board import parse_board
from rllm_envs.frozenlake.solver import MOVE_NAMES, shortest_path
from rllm_train.config import build_config
from rllm_train.native.models import load_policy, pick_device
from rllm_train.native.sampler import ExecutionSampler, PolicyServing, RolloutLimits
from rllm_train.native.tree import TreeSampler

MOVES = ("Down", "Right", "Left", "Up")
MOVE_WEIGHTS = (0.35, 0.35, 0.15, 0.15)
SETTINGS = {
    "4x4 solid": {"size": 4, "p": 0.8, "is_slippery": False},
    "4x4 slippery": {"size": 4, "p": 0.8, "is_slippery": True},
}


class ScriptedMoves:
    """A rollout engine whose replies are moves chosen by a script, drawn from each request's
    own seed (the execution engine gives every request one), so a run is reproducible.
    `expert` is the chance of the shortest path's move (read off the prompt's last board)."""

    def __init__(self, tokenizer: Any, expert: float = 0.0) -> None:
        self.tokenizer = tokenizer
        self.expert = expert

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams = SamplingParams(),  # noqa: B008 - the protocol's own default
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        draws = np.random.default_rng(sampling.seed)
        move = draws.choice(MOVES, p=MOVE_WEIGHTS)
        if self.expert:
            path = self._shortest_path(prompt_ids or [])
            move = (
                MOVE_NAMES[path[0]]
                if path and draws.random() < self.expert
                else draws.choice(MOVES)
            )
        text = f"I go `{move}`."
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return ModelOutput(text, prompt_ids=list(prompt_ids or []), completion_ids=ids)

    def _shortest_path(self, prompt_ids: list[int]) -> list[int] | None:
        # Special tokens (the chat template's turn ends) would glue onto the board's last row.
        rows, player = parse_board(self.tokenizer.decode(prompt_ids, skip_special_tokens=True))
        return shortest_path(rows, player) if player is not None else None

    def close(self) -> None:
        """Nothing to release."""

    async def aclose(self) -> None:
        self.close()


@dataclass
class Side:
    advantage_variance: float
    advantage_variance_se: float  # standard error of that mean over the groups
    baseline_error: float
    baseline_error_se: float
    informative: float
    informative_se: float
    branched: float
    seconds: float


def group_returns(episodes, groups, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(the k returns GRPO would compare, the reference returns) of every group."""
    by_group: dict[str, list[float]] = defaultdict(list)
    for episode, group in zip(episodes, groups, strict=True):
        by_group[group].append(float(episode.trajectories[0].reward))
    return [(np.array(r[:k]), np.array(r[k:])) for r in by_group.values()]


def measure(returns, branched: float, seconds: float) -> Side:
    variances = np.array([np.var(group) for group, _ in returns])
    errors = np.array([(group.mean() - reference.mean()) ** 2 for group, reference in returns])
    informative = np.array([np.ptp(group) > 0 for group, _ in returns], dtype=float)
    return Side(
        advantage_variance=float(variances.mean()),
        advantage_variance_se=float(variances.std(ddof=1) / np.sqrt(len(variances))),
        baseline_error=float(errors.mean()),
        baseline_error_se=float(errors.std(ddof=1) / np.sqrt(len(errors))),
        informative=float(informative.mean()),
        informative_se=float(informative.std(ddof=1) / np.sqrt(len(informative))),
        branched=branched,
        seconds=seconds,
    )


SCRIPTED = {"random": 0.0, "noisy-expert": 0.7}  # policy -> chance of the expert's move


def policy(name: str) -> tuple[Any, Any, Any]:
    """(model, tokenizer, engine or None: a LocalEngine on the model)."""
    config = build_config(overrides={"model.name": "tiny" if name in SCRIPTED else name})
    model, tokenizer, _ = load_policy(config.model, pick_device("auto"))
    engine = ScriptedMoves(tokenizer, SCRIPTED[name]) if name in SCRIPTED else None
    return model, tokenizer, engine


def run_setting(env_kwargs: dict, args: argparse.Namespace, model, tokenizer, engine) -> dict:
    size = args.k + args.reference
    limits = RolloutLimits(
        max_turns=args.max_turns,
        max_response_tokens=args.max_response_tokens,
        max_prompt_tokens=4096,
    )
    seeds = [int(s) for s in np.random.default_rng(args.seed).integers(0, 2**31 - 1, args.groups)]
    repeated = [seed for seed in seeds for _ in range(size)]

    def serving() -> PolicyServing:
        """A side's policy: the scripted engine, shared by every side, or a LocalEngine of the
        side's own on the model."""
        if engine is not None:
            return PolicyServing(model, tokenizer, engine)
        return PolicyServing.on_model(model, tokenizer, max_batch_size=len(repeated))

    play = (lambda: gym.make("rllm/FrozenLake-v0", **env_kwargs), FrozenLakeAgent, limits)
    samplers = {"plain": ExecutionSampler(serving(), *play)}
    for turn in args.branch_turns:
        samplers[f"tree@{turn}"] = TreeSampler(serving(), *play, branches=size, branch_turns=[turn])
    sides = {}
    for name, sampler in samplers.items():
        started = time.perf_counter()
        rollout = sampler.sample(repeated, args.temperature, args.seed)
        seconds = time.perf_counter() - started
        groups = rollout.groups or [str(seed) for seed in repeated]
        mid = [e.info.get("tree", {}).get("start_turn", 0) > 0 for e in rollout.episodes]
        returns = group_returns(rollout.episodes, groups, args.k)
        sides[name] = measure(returns, float(np.mean(mid)), seconds)
    if engine is None:  # the samplers' own LocalEngines
        for sampler in samplers.values():
            sampler.close()
    return sides


def report(results: dict[str, dict[str, Side]]) -> None:
    width = max(len(case) for case in results) + 2
    header = (
        f"{'policy, lake':<{width}}{'side':<8}{'adv var (s.e.)':>18}{'baseline err (s.e.)':>22}"
    )
    print(header + f"{'informative':>13}{'branched':>10}{'time s':>8}")
    for case, sides in results.items():
        for name, side in sides.items():
            variance = f"{side.advantage_variance:.4f} ({side.advantage_variance_se:.4f})"
            error = f"{side.baseline_error:.5f} ({side.baseline_error_se:.5f})"
            print(
                f"{case:<{width}}{name:<8}{variance:>18}{error:>22}{side.informative:>13.0%}"
                f"{side.branched:>10.0%}{side.seconds:>8.1f}"
            )
        plain = sides["plain"]
        for name, tree in sides.items():
            if name != "plain":
                print(
                    f"{case:<{width}}ratio {name}/plain: "
                    f"adv var {_ratio(tree.advantage_variance, plain.advantage_variance)}, "
                    f"baseline err {_ratio(tree.baseline_error, plain.baseline_error)}, "
                    f"informative groups {_ratio(tree.informative, plain.informative)}"
                )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a (plain is 0)"


PANELS = (
    ("advantage_variance", "advantage variance per group"),
    ("baseline_error", "baseline squared error per group"),
    ("informative", "informative groups (not all equal)"),
)


def plot(results: dict[str, dict[str, Side]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(1, len(PANELS), figsize=(14, 3.8))
    cases = list(results)
    positions = np.arange(len(cases))
    sides = list(results[cases[0]])
    width = 0.8 / len(sides)
    for axis, (metric, panel) in zip(axes, PANELS, strict=True):
        for number, side in enumerate(sides):
            values = [getattr(results[case][side], metric) for case in cases]
            errors = [getattr(results[case][side], f"{metric}_se") for case in cases]
            offset = (number - (len(sides) - 1) / 2) * width
            name = "plain GRPO" if side == "plain" else f"tree, branch after turn {side[5:]}"
            axis.bar(positions + offset, values, width, yerr=errors, capsize=2, label=name)
        axis.set_xticks(positions, [case.replace(", ", "\n") for case in cases], fontsize=8)
        axis.set_title(panel, fontsize=10)
    axes[0].legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=40, help="tasks (groups) per setting")
    parser.add_argument("--k", type=int, default=8, help="episodes per GRPO group")
    parser.add_argument("--reference", type=int, default=16, help="episodes estimating V")
    parser.add_argument(
        "--branch-turns",
        type=lambda text: [int(turn) for turn in text.split(",")],
        default=[2],
        help="one tree side per turn (docs' figure: 1,2)",
    )
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-response-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument(
        "--policies", default=",".join(SCRIPTED), help=f"{', '.join(SCRIPTED)}, smollm2, tiny"
    )
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, help="write the side-by-side figure here (PNG)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    started = time.perf_counter()
    results = {}
    for name in args.policies.split(","):
        model, tokenizer, engine = policy(name)
        for setting in args.settings.split(","):
            case = f"{name}, {setting}"
            results[case] = run_setting(SETTINGS[setting], args, model, tokenizer, engine)
        if engine is not None:
            asyncio.run(engine.aclose())
    print(
        f"{args.groups} groups of k={args.k} per side, V from {args.reference} more episodes "
        f"per group; tree branches after turns {args.branch_turns}; at most {args.max_turns} "
        f"turns; {time.perf_counter() - started:.0f} s in all"
    )
    report(results)
    if args.plot:
        title = (
            f"FrozenLake 4x4: {args.groups} groups of {args.k} per side "
            "(bars: mean over groups, whiskers: standard error)"
        )
        plot(results, args.plot, title)
    if args.json:
        figures = {c: {n: vars(side) for n, side in sides.items()} for c, sides in results.items()}
        settings = {key: str(value) if isinstance(value, Path) else value
                    for key, value in vars(args).items()}  # fmt: skip
        args.json.write_text(json.dumps({"args": settings, "results": figures}, indent=1))


if __name__ == "__main__":
    main()
