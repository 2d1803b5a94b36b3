"""Rollout throughput: how close the execution engine gets to the model server's limit, and how
much the local engine gains from batching.

    python benchmarks/engine_throughput.py [--latency 0.5] [--turns 4] [--parallel 1,16,64,256]
                                           [--local-model smollm2] [--skip-local]

1. Agents: a loopback OpenAI-compatible server (``rllm_agents.testing.fault_server``, in a
   child process like any real model server, so it takes no CPU or GIL time from the engine
   under test) answers every request after exactly ``--latency`` seconds with a canned reply
   "`Left`". On the
   default (not slippery) lakes of ``rllm/FrozenLake-v0`` the player starts in the top-left
   corner, so Left never moves it and every episode lasts exactly ``--turns`` model calls. With
   n agents the ideal is therefore n / (latency * turns) episodes/s; the script prints the
   measured rate as a percentage of it (goal: >= 95 % at 256 agents). Each agent plays
   ``--episodes-per-agent`` episodes (default 4: a rollout of 1,024 episodes at 256 agents, long
   enough that launching the agents - making their envs, opening one connection each, about
   0.15 s at 256 agents and printed as "launch" - is not the main term; ``--episodes-per-agent
   2`` shows it weighing twice as much). Every agent count runs ``--rounds`` times (a fresh server,
   engine and envs each time, so every round is a cold start: new connections, new envs); the
   median round is the result and all rounds are printed, since on a shared machine one round
   can land on a burst of other work. Also printed: the engine process's CPU time per turn,
   which does not depend on what else the machine runs, and the load average, which does.
2. Local engine: completion tokens/s of ``LocalEngine`` with 16 concurrent requests against one
   request at a time, same prompts, sampled at temperature 1 with a fixed budget (goal >= 5x).
   Single and concurrent rounds alternate and the best round of each counts, so a burst of
   load from other processes does not decide the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import rllm_envs  # noqa: F401  (registers the env ids)
from rllm_agents.agents.frozenlake_agent import FrozenLakeAgent
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.execution import AgentExecutionEngine
from rllm_agents.types import TerminationReason

AGENT_GOAL_PERCENT = 95.0
BATCH_GOAL_SPEEDUP = 5.0
CANNED_REPLY = "Staying put: `Left`"
STORY_PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Describe a walk through a forest in autumn.",
    "Explain how bread is baked, step by step.",
    "Tell me about the history of sailing ships.",
]


@dataclass
class AgentRun:
    parallel: int
    episodes: int
    turns: int
    wall_s: float
    episodes_per_s: float
    ideal_episodes_per_s: float
    percent_of_ideal: float
    cpu_ms_per_turn: float
    launch_ms: float
    load_average: float
    server_max_in_flight: int


# The canned server runs in its own interpreter; it prints its port, serves until its stdin
# closes, then prints what it saw.
_SERVER_SCRIPT = """
import json, sys
from rllm_agents.testing.fault_server import FaultServer
with FaultServer(latency_s=float(sys.argv[1]), completion=sys.argv[2]) as server:
    print(server.port, flush=True)
    sys.stdin.read()
    print(json.dumps({"max_in_flight": server.stats.max_in_flight}), flush=True)
"""


class LaunchClock:
    """Passes requests to the engine; notes when the n-th request started.

    With n agents that is the launch: every agent has made its env and sent its first request.
    """

    def __init__(self, engine: OpenAIEngine, agents: int) -> None:
        self.engine = engine
        self.agents = agents
        self.requests = 0
        self.started = time.perf_counter()
        self.launched_at = 0.0

    async def generate(self, *args, **kwargs):
        self.requests += 1
        if self.requests == self.agents:
            self.launched_at = time.perf_counter()
        return await self.engine.generate(*args, **kwargs)


class CannedServer:
    """The fault server with fixed latency and no faults, in a child process."""

    def __init__(self, latency: float, completion: str) -> None:
        self.args = [sys.executable, "-c", _SERVER_SCRIPT, str(latency), completion]
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.max_in_flight = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> CannedServer:
        self.process = subprocess.Popen(
            self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"the canned server did not start (said {line!r})")
        self.port = int(line)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            out, _ = self.process.communicate(input="", timeout=30)
            lines = out.strip().splitlines()
            self.max_in_flight = json.loads(lines[-1])["max_in_flight"] if lines else 0
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


async def _agent_run(parallel: int, latency: float, turns: int, per_agent: int) -> AgentRun:
    episodes_wanted = parallel * per_agent
    load = os.getloadavg()[0]
    with CannedServer(latency, CANNED_REPLY) as server:
        engine = OpenAIEngine(server.base_url, "canned", timeout=30, max_connections=1024)
        clock = LaunchClock(engine, parallel)
        runner = AgentExecutionEngine(
            FrozenLakeAgent,
            lambda: gym.make("rllm/FrozenLake-v0"),
            clock,
            n_parallel=parallel,
            max_turns=turns,
            sampling=SamplingParams(max_tokens=16),
            progress=False,
        )
        try:
            started, cpu_started = time.perf_counter(), time.process_time()
            clock.started = started
            episodes = await runner.execute_seeds(range(episodes_wanted))
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
        finally:
            await engine.aclose()
    lost = [e for e in episodes if e.termination_reason != TerminationReason.MAX_TURNS]
    if lost or len(episodes) != episodes_wanted:
        raise RuntimeError(f"{len(lost)} episodes did not run their {turns} turns: {lost[:1]}")
    ideal = parallel / (latency * turns)
    rate = len(episodes) / wall
    return AgentRun(
        parallel=parallel,
        episodes=len(episodes),
        turns=turns,
        wall_s=round(wall, 3),
        episodes_per_s=round(rate, 2),
        ideal_episodes_per_s=round(ideal, 2),
        percent_of_ideal=round(100 * rate / ideal, 1),
        cpu_ms_per_turn=round(1000 * cpu / (len(episodes) * turns), 3),
        launch_ms=round(1000 * (clock.launched_at - clock.started), 1),
        load_average=round(load, 2),
        server_max_in_flight=server.max_in_flight,
    )


async def _local_round(engine, concurrency: int, max_tokens: int, round_index: int):
    """(tokens per wall second, tokens per CPU second) of one round of `concurrency` requests."""
    sampling = SamplingParams(temperature=1.0, max_tokens=max_tokens)
    prompts = [
        [{"role": "user", "content": STORY_PROMPTS[(round_index + i) % len(STORY_PROMPTS)]}]
        for i in range(concurrency)
    ]
    started, cpu_started = time.perf_counter(), time.process_time()
    outputs = await asyncio.gather(*(engine.generate(p, sampling=sampling) for p in prompts))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    tokens = sum(len(o.completion_ids) for o in outputs)
    # Per CPU-second as well: on a shared machine the wall-clock rate mostly measures the
    # neighbours' load, while CPU time shows what batching saves.
    return tokens / wall, tokens / cpu


async def _local_speedup(model: str, max_tokens: int, rounds: int) -> dict[str, float]:
    from rllm_agents.engines.local import LocalEngine

    engine = LocalEngine.from_name(model, max_batch_size=16)
    single, batched = (0.0, 0.0), (0.0, 0.0)
    try:
        await _local_round(engine, 1, 4, 0)  # warm-up: first-call overheads
        passes, rows = 0, 0
        for round_index in range(rounds):
            one = await _local_round(engine, 1, max_tokens, round_index)
            passes, rows = passes - engine.stats.decode_passes, rows - engine.stats.decoded_rows
            many = await _local_round(engine, 16, max_tokens, round_index)
            passes, rows = passes + engine.stats.decode_passes, rows + engine.stats.decoded_rows
            single = (max(single[0], one[0]), max(single[1], one[1]))
            batched = (max(batched[0], many[0]), max(batched[1], many[1]))
    finally:
        engine.close()
    return {
        "model": model,
        "max_tokens": max_tokens,
        "tokens_per_s_1": round(single[0], 1),
        "tokens_per_s_16": round(batched[0], 1),
        "speedup": round(batched[0] / single[0], 2),
        "tokens_per_cpu_s_1": round(single[1], 1),
        "tokens_per_cpu_s_16": round(batched[1], 1),
        "cpu_speedup": round(batched[1] / single[1], 2),
        "mean_rows_per_step_16": round(rows / passes, 1),
        "load_average": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.5, help="server latency L (s)")
    parser.add_argument("--turns", type=int, default=4, help="model calls per episode")
    parser.add_argument("--episodes-per-agent", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="runs per agent count (median)")
    parser.add_argument("--parallel", default="1,16,64,256", help="comma-separated agent counts")
    parser.add_argument("--local-model", default="smollm2")
    parser.add_argument("--local-max-tokens", type=int, default=48)
    parser.add_argument("--local-rounds", type=int, default=3)
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch intra-op threads for the local engine (default: torch's own choice); on a "
        "machine whose cores are busy with other work, 1 avoids threads spinning on each other",
    )
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-agents", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = parser.parse_args(argv)

    runs, all_rounds = [], []
    print(f"agents on rllm/FrozenLake-v0, server latency {args.latency}s, {args.turns} turns")
    print(
        f"{'agents':>7} {'episodes':>9} {'wall s':>8} {'ep/s':>8} {'ideal':>8} {'% ideal':>8}"
        f" {'cpu ms/turn':>12} {'launch ms':>10} {'load':>6}   rounds (% ideal)"
    )
    counts = [] if args.skip_agents else [int(n) for n in args.parallel.split(",")]
    for parallel in counts:
        rounds = [
            asyncio.run(_agent_run(parallel, args.latency, args.turns, args.episodes_per_agent))
            for _ in range(max(1, args.rounds))
        ]
        run = sorted(rounds, key=lambda r: r.percent_of_ideal)[len(rounds) // 2]
        runs.append(run)
        all_rounds.append([r.percent_of_ideal for r in rounds])
        print(
            f"{run.parallel:>7} {run.episodes:>9} {run.wall_s:>8.2f} {run.episodes_per_s:>8.2f} "
            f"{run.ideal_episodes_per_s:>8.2f} {run.percent_of_ideal:>7.1f}%"
            f" {run.cpu_ms_per_turn:>12.3f} {run.launch_ms:>10.1f} {run.load_average:>6.2f}   "
            + " / ".join(f"{r.percent_of_ideal:.1f}" for r in rounds)
        )
    report: dict = {
        "agents": [asdict(r) for r in runs],
        "agent_rounds_percent": all_rounds,
        "agent_goal_percent": AGENT_GOAL_PERCENT,
    }

    if not args.skip_local:
        import torch

        if args.torch_threads:
            torch.set_num_threads(args.torch_threads)
        local = asyncio.run(
            _local_speedup(args.local_model, args.local_max_tokens, args.local_rounds)
        )
        local["torch_threads"] = torch.get_num_threads()
        report["local_engine"] = local
        print(
            f"LocalEngine({local['model']}, {local['torch_threads']} torch threads): "
            f"{local['tokens_per_s_1']} tok/s alone, "
            f"{local['tokens_per_s_16']} tok/s at 16 concurrent -> {local['speedup']}x "
            f"(goal >= {BATCH_GOAL_SPEEDUP}x, {local['mean_rows_per_step_16']} rows per step); per "
            f"CPU-second "
            f"{local['tokens_per_cpu_s_1']} vs {local['tokens_per_cpu_s_16']} -> "
            f"{local['cpu_speedup']}x (load average {local['load_average']})"
        )
    if args.json:
        print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
