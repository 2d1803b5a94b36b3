"""Context compaction policies side by side on a long-horizon task at a fixed context budget.

    python benchmarks/compaction.py [--episodes 2] [--seed 0] [--budget 700] [--max-turns 20]
        [--max-tokens 16] [--summary-tokens 64] [--keep-turns 2]
        [--policies none,last_turns,drop_tool_outputs,summarize,summarize_with]
        [--summary-engine second|same] [--model smollm2|tiny] [--engine batch|servers]
        [--slots 2] [--parallel 2] [--json PATH]

Every policy plays the same episodes of rllm/FrozenLake-v0 on 8x8 lakes (reset seeds ``--seed``,
``--seed + 1``, ...; the same per-request sampling seeds) with FrozenLakeAgent, through the
execution engine with ``max_context_tokens=--budget``. Under ``none`` an episode ends
``prompt_too_long`` once its next prompt would pass the budget; under the others its context is
compacted (rllm_agents.execution.compaction) and it goes on, up to ``--max-turns``. One policy
after the other on the same engine, each timed on its own (the engine's start is not counted).

Printed, one row per policy (per episode: means over the episodes):

* episodes, success (``is_correct`` or reward > 0), mean reward, turns played, valid moves
  (turns whose reply held a move the env could read);
* compactions, and the tokens spent: the policy model's prompt and completion tokens
  (``Episode.metrics``), the summaries' tokens (``info["compactions"]``: in the completion tokens
  for ``summarize``, another engine's for ``summarize_with``), the training sequences
  (``Trajectory.sequences``, or the single sequence) and their tokens (prompt + response);
* the policy's wall time; then how each policy's episodes ended.

The model: the embedded SmolLM2-135M on llama.cpp in this process, its F16 copy batched by a
LocalEngine (``--engine batch``: what ``rollout.engine=llamacpp`` trains with; token ids exact),
or its Q4_1 GGUF on ``--slots`` llama.cpp servers (``--engine servers``: what rllm-eval runs;
they take no token prompts, so prompts go as detokenised text and replies are re-tokenised).
``--model tiny`` runs the random test model on transformers instead (a quick check that the
script works; its figures mean nothing). ``summarize_with`` has its summaries written by a
second engine serving the same model (``--summary-engine second``: its own llama.cpp model or
server) or by the policy's own engine object (``same``); either way its summaries are context,
not trained. The small model rarely writes a move FrozenLake can read and almost never reaches the
goal, so success is expected to be 0: the table shows what each policy costs and how far it
carries an episode past the budget, not what it earns. The defaults take about 4-5 minutes on
a 2-core machine (most of it reading prompts again after each compaction); ``--max-turns 40``
plays twice as long.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections import Counter
from typing import Any

import gymnasium as gym
import rllm_envs  # noqa: F401  (registers rllm/FrozenLake-v0)
from rllm_agents.agents import FrozenLakeAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.execution.compaction import CompactionSettings
from rllm_agents.types import Episode

POLICIES = ("none", "last_turns", "drop_tool_outputs", "summarize", "summarize_with")
LAKE_SIZE = 8


class Engines:
    """The policy's engine, its tokenizer, and the engine that writes summarize_with's
    summaries (`summary`, with a line saying what it is)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.closers: list[Any] = []
        started = time.perf_counter()
        try:
            self.policy, self.tokenizer, self.described = self._start(args, args.slots, args.seed)
            self.summary, self.summary_described = self.policy, None
            wanted = "summarize_with" in args.policies
            if wanted and args.summary_engine == "same":
                self.summary_described = f"the policy's own engine object ({self.described})"
            elif wanted:
                self.summary, _, described = self._start(args, 1, args.seed + 100)
                self.summary_described = f"a second engine serving the same model ({described})"
            asyncio.run(self._warm_up())
        except BaseException:
            self.close()
            raise
        self.start_s = time.perf_counter() - started

    async def _warm_up(self) -> None:
        """One short request to each engine, so no policy pays for a first call."""
        sampling = SamplingParams(temperature=1.0, max_tokens=4)
        hello = [{"role": "user", "content": "Hello"}]
        for engine in {id(self.policy): self.policy, id(self.summary): self.summary}.values():
            await engine.generate(messages=hello, sampling=sampling)

    def _start(self, args: argparse.Namespace, slots: int, seed: int) -> tuple[Any, Any, str]:
        from rllm_agents.engines.local import LocalEngine

        if args.model == "tiny":
            engine = LocalEngine.from_name("tiny", max_batch_size=16, seed=seed)
            self.closers.append(engine.close)
            return engine, engine.tokenizer, "tiny, transformers in this process"
        from rllm_agents.engines.llamacpp.server import LlamaCppEngine, usable_cores
        from rllm_agents.models import load_tokenizer, smollm2_gguf_path

        tokenizer = load_tokenizer("smollm2")
        if args.engine == "servers":
            engine = LlamaCppEngine.start("smollm2", slots=slots, seed=seed, tokenizer=tokenizer)
            self.closers.append(lambda: asyncio.run(engine.aclose()))
            plural = "s" if slots != 1 else ""
            return engine, tokenizer, f"smollm2 Q4_1 on {slots} llama.cpp server{plural}"
        from rllm_agents.engines.llamacpp.batch import LlamaCppModel
        from rllm_agents.engines.llamacpp.gguf_retype import f16_copy

        model = LlamaCppModel(f16_copy(smollm2_gguf_path()), threads=usable_cores())
        engine = LocalEngine(model, tokenizer, max_batch_size=64, seed=seed)
        self.closers.append(engine.close)
        return engine, tokenizer, "smollm2 F16 on llama.cpp in this process (LocalEngine)"

    def close(self) -> None:
        for close in reversed(self.closers):
            close()


def settings_for(policy: str, args: argparse.Namespace, engines: Engines) -> CompactionSettings:
    return CompactionSettings(
        policy=policy,
        keep_turns=args.keep_turns,
        summary_tokens=args.summary_tokens,
        summary_engine=engines.summary if policy == "summarize_with" else None,
    )


def play(policy: str, args: argparse.Namespace, engines: Engines) -> tuple[list[Episode], float]:
    """The episodes of one policy, and the wall seconds they took."""
    executor = AgentExecutionEngine(
        FrozenLakeAgent,
        lambda: gym.make("rllm/FrozenLake-v0", size=LAKE_SIZE, max_turns=args.max_turns),
        engines.policy,
        tokenizer=engines.tokenizer,
        n_parallel=args.parallel,
        max_turns=args.max_turns,
        max_context_tokens=args.budget,
        sampling=SamplingParams(temperature=1.0, max_tokens=args.max_tokens),
        sampling_seed=args.seed,
        progress=False,
        compaction=settings_for(policy, args, engines),
    )
    seeds = list(range(args.seed, args.seed + args.episodes))
    started = time.perf_counter()
    try:
        episodes = executor.run(seeds=seeds)
    finally:
        executor.close()
    return episodes, time.perf_counter() - started


def sequences_of(episode: Episode) -> list[tuple[int, int]]:
    """(prompt tokens, response tokens) of each training sequence of the episode."""
    trajectory = episode.trajectories[0]
    if trajectory.sequences:
        return [(len(s.prompt_ids), len(s.response_ids)) for s in trajectory.sequences]
    if trajectory.prompt_ids or trajectory.response_ids:
        return [(len(trajectory.prompt_ids), len(trajectory.response_ids))]
    return []


def valid_moves(episode: Episode) -> int:
    transitions = episode.env.transitions if episode.env is not None else []
    return sum(t.info.get("action_valid", True) is not False for t in transitions)


def summarise(policy: str, episodes: list[Episode], wall_s: float) -> dict[str, Any]:
    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    def metric(name: str) -> float:
        return mean([float(e.metrics.get(name, 0.0)) for e in episodes])

    def reward(episode: Episode) -> float:
        return float(sum(t.reward for t in episode.trajectories))

    records = [r for e in episodes for t in e.trajectories for r in t.info.get("compactions", [])]
    sequences = [sequences_of(e) for e in episodes]
    return {
        "policy": policy,
        "episodes": len(episodes),
        "success": sum(bool(e.is_correct) or reward(e) > 0 for e in episodes) / len(episodes),
        "reward": mean([reward(e) for e in episodes]),
        "turns": metric("turns"),
        "valid_moves": mean([valid_moves(e) for e in episodes]),
        "compactions": metric("compactions"),
        "prompt_tokens": metric("prompt_tokens"),
        "completion_tokens": metric("completion_tokens"),
        "summary_tokens": sum(r.get("summary_tokens", 0) for r in records) / len(episodes),
        "summaries": sum(r.get("summary") is not None for r in records),
        "summaries_trained": sum(bool(r.get("summary_trained")) for r in records),
        "sequences": mean([len(s) for s in sequences]),
        "sequence_tokens": mean([sum(p + r for p, r in s) for s in sequences]),
        "wall_s": wall_s,
        "ended": dict(
            Counter(e.termination_reason.value if e.termination_reason else "?" for e in episodes)
        ),
        "errors": sorted({e.error for e in episodes if e.error}),
    }


COLUMNS = (
    ("policy", "policy", 17, "s"),
    ("episodes", "eps", 4, "d"),
    ("success", "success", 7, ".0%"),
    ("reward", "reward", 6, ".2f"),
    ("turns", "turns", 6, ".1f"),
    ("valid_moves", "valid", 6, ".1f"),
    ("compactions", "compact", 7, ".1f"),
    ("prompt_tokens", "prompt tok", 10, ".0f"),
    ("completion_tokens", "compl tok", 9, ".0f"),
    ("summary_tokens", "summ tok", 8, ".0f"),
    ("sequences", "seqs", 5, ".1f"),
    ("sequence_tokens", "seq tok", 7, ".0f"),
    ("wall_s", "wall s", 7, ".1f"),
)


def table(rows: list[dict[str, Any]]) -> str:
    header = " ".join(f"{title:>{width}}" for _, title, width, _ in COLUMNS)
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(" ".join(f"{row[key]:>{width}{form}}" for key, _, width, form in COLUMNS))
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2, help="episodes per policy")
    parser.add_argument("--seed", type=int, default=0, help="first reset seed; sampling seed")
    parser.add_argument("--budget", type=int, default=700, help="max_context_tokens")
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=16, help="per model turn")
    parser.add_argument("--summary-tokens", type=int, default=64)
    parser.add_argument("--keep-turns", type=int, default=2)
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    parser.add_argument("--summary-engine", choices=("second", "same"), default="second")
    parser.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    parser.add_argument(
        "--engine",
        choices=("batch", "servers"),
        default="batch",
        help="smollm2 on llama.cpp in this process, batched (as rollout.engine=llamacpp), or "
        "on llama.cpp servers (as rllm-eval)",
    )
    parser.add_argument("--slots", type=int, default=2, help="--engine servers: servers")
    parser.add_argument("--parallel", type=int, default=2, help="episodes played at once")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    args.policies = [p for p in args.policies.split(",") if p]
    for policy in args.policies:
        if policy not in POLICIES and ":" not in policy:
            parser.error(f"unknown policy {policy!r}: one of {', '.join(POLICIES)}")
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse(argv)
    engines = Engines(args)
    load = os.getloadavg()[0]
    print(f"rllm/FrozenLake-v0 {LAKE_SIZE}x{LAKE_SIZE}, FrozenLakeAgent, {args.episodes} episodes "
          f"per policy (reset seeds {args.seed}..{args.seed + args.episodes - 1}), "
          f"max_context_tokens={args.budget}, max_turns={args.max_turns}, "
          f"{args.max_tokens} tokens per turn, temperature 1")  # fmt: skip
    print(f"policy model: {engines.described} (started in {engines.start_s:.1f} s, not counted)")
    if engines.summary_described:
        print(f"summarize_with's summaries: {engines.summary_described}")
    print(f"keep_turns={args.keep_turns}, summary_tokens={args.summary_tokens}, target 0.75; "
          f"load average at the start: {load:.1f} on {os.cpu_count()} cores")  # fmt: skip
    rows = []
    try:
        for policy in args.policies:
            episodes, wall_s = play(policy, args, engines)
            rows.append(summarise(policy, episodes, wall_s))
            print(f"  {policy}: {len(episodes)} episodes in {wall_s:.1f} s", flush=True)
    finally:
        engines.close()
    print()
    print("per episode: turns, valid moves, compactions, tokens and sequences (means)")
    print(table(rows))
    print()
    for row in rows:
        ended = ", ".join(f"{reason} {count}" for reason, count in sorted(row["ended"].items()))
        written = row["summaries"]
        trained = f"; {written} summaries, {row['summaries_trained']} trained" if written else ""
        print(f"{row['policy']:<17} ended: {ended}{trained}")
        for error in row["errors"]:
            print(f"{'':<17} error: {error[:200]}")
    total = sum(row["wall_s"] for row in rows)
    print(f"\nwall time of the policies: {total:.1f} s; load average at the end: "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    if not any(row["success"] for row in rows):
        print("no policy reached the goal in any episode: the small model seldom writes a move "
              "the env can read (see 'valid'), so the table compares what the policies cost and "
              "how long they keep an episode going, not what they earn")  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    return rows


if __name__ == "__main__":
    main()
