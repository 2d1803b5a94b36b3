"""What rllm/MCP-v0 adds to a tool call, and how 32 envs sharing one server fare.

    python benchmarks/mcp_overhead.py [--calls 600] [--rounds 6] [--envs 32] [--steps-per-env 20]

1. Latency: the same tool call (``open_document`` on the shipped retrieval server, over stdio)
   through ``env.step``, through a raw MCP client session awaited on the caller's own event
   loop, and through a raw client called from synchronous code via a loop thread (what any
   synchronous caller of the async SDK pays), in interleaved rounds so all see the same
   machine load; median and p95 wall time of the best round of each and the ratios of
   medians (goal: env/raw <= 1.2). The env's number includes parsing the action, checking
   the arguments against the schema, the hop to the manager's loop thread and formatting
   the observation.
2. Concurrency: ``--envs`` envs made in one process share one server process; each runs on its
   own thread, ``--steps-per-env`` tool calls each; total calls/s, latency percentiles and
   the number of server processes started.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from rllm_envs.mcp import MCPEnv
from rllm_envs.mcp.env import RETRIEVAL_SERVER

LATENCY_RATIO_GOAL = 1.2
ACTION = '<tool_call>{"name": "open_document", "arguments": {"doc_id": "person-09"}}</tool_call>'
TASKS = [{"question": "Where was Sekrous Pirkdrifur born?", "answer": "Kreaxreas"}]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class ThreadedClient:
    """A raw MCP client on an event loop thread of its own, called from synchronous code: the
    least any synchronous caller (a Gymnasium env) of the async client pays."""

    def __init__(self, parameters: object) -> None:
        from mcp import Client
        from mcp.client.stdio import stdio_client

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.errlog = open(os.devnull, "w")  # noqa: SIM115 - closed in close()
        ready: concurrent.futures.Future = concurrent.futures.Future()

        async def hold() -> None:
            self.stop = asyncio.Event()
            async with Client(stdio_client(parameters, errlog=self.errlog)) as client:
                ready.set_result(client)
                await self.stop.wait()

        self.holder = asyncio.run_coroutine_threadsafe(hold(), self.loop)
        self.client = ready.result(60)

    def call(self, name: str, arguments: dict) -> object:
        coroutine = self.client.call_tool(name, arguments)
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.holder.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        self.errlog.close()


def latencies(calls: int, rounds: int) -> dict[str, list[float]]:
    """Per-call wall times of three paths, in interleaved rounds (so all see the same load):
    `env.step`, a raw client awaited on the caller's own loop, and a raw client called from
    synchronous code through a loop thread. The round with the lowest median counts for each."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    spec = RETRIEVAL_SERVER["retrieval"]
    parameters = StdioServerParameters(command=spec["command"], args=spec["args"])
    arguments = {"doc_id": "person-09"}
    env = MCPEnv(tasks=TASKS, max_turns=calls * rounds + 100)
    threaded = ThreadedClient(parameters)
    per_round = max(1, calls // rounds)

    def timed(call) -> float:
        started = time.perf_counter()
        call()
        return time.perf_counter() - started

    async def run() -> dict[str, list[list[float]]]:
        paths: dict[str, list[list[float]]] = {"env": [], "raw": [], "raw_sync": []}
        with open(os.devnull, "w") as errlog:
            async with Client(stdio_client(parameters, errlog=errlog)) as client:
                env.reset(seed=0)
                for _ in range(20):  # warm-up of every path
                    env.step(ACTION)
                    threaded.call("open_document", arguments)
                    await client.call_tool("open_document", arguments)
                for _ in range(rounds):
                    for timings in paths.values():
                        timings.append([])
                    # Call by call in turn, so that load changes hit all three paths alike.
                    for _ in range(per_round):
                        started = time.perf_counter()
                        await client.call_tool("open_document", arguments)
                        paths["raw"][-1].append(time.perf_counter() - started)
                        # Blocking on purpose: these two run their calls on loop threads.
                        paths["raw_sync"][-1].append(
                            timed(lambda: threaded.call("open_document", arguments))
                        )
                        paths["env"][-1].append(timed(lambda: env.step(ACTION)))
        return paths

    try:
        paths = asyncio.run(run())
    finally:
        env.close()
        threaded.close()
    return {name: min(runs, key=statistics.median) for name, runs in paths.items()}


def server_processes() -> int:
    """Retrieval server processes started by this process (its children)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if parent == os.getpid() and b"rllm_envs.mcp.retrieval.server" in command:
            count += 1
    return count


def concurrent_run(envs_count: int, steps: int) -> dict[str, float]:
    before = server_processes()
    started = time.perf_counter()
    envs = [MCPEnv(tasks=TASKS, max_turns=steps + 1) for _ in range(envs_count)]
    make_seconds = time.perf_counter() - started
    servers = server_processes() - before
    latencies: list[float] = []
    lock = threading.Lock()
    failures: list[str] = []

    def worker(env: MCPEnv) -> None:
        env.reset(seed=0)
        mine = []
        for _ in range(steps):
            begun = time.perf_counter()
            observation, _, _, _, info = env.step(ACTION)
            mine.append(time.perf_counter() - begun)
            if "failure" in info or "Kreaxreas" not in observation:
                failures.append(observation[:200])
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(env,)) for env in envs]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    for env in envs:
        env.close()
    return {
        "envs": envs_count,
        "server_processes": servers,
        "make_all_s": make_seconds,
        "calls": len(latencies),
        "failures": len(failures),
        "calls_per_s": len(latencies) / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * percentile(latencies, 0.95),
        "leftover_servers": server_processes() - before,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600, help="calls per path, in all rounds")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--steps-per-env", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    arguments = parser.parse_args(argv)

    times = latencies(arguments.calls, arguments.rounds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    labels = {
        "env": "env.step",
        "raw": "a raw MCP client, awaited",
        "raw_sync": "a raw MCP client from sync code (loop thread)",
    }
    for name, label in labels.items():
        print(
            f"tool call through {label}: median {1000 * medians[name]:.2f} ms, "
            f"p95 {1000 * percentile(times[name], 0.95):.2f} ms"
        )
    ratio = medians["env"] / medians["raw"]
    sync_ratio = medians["env"] / medians["raw_sync"]
    verdict = "meets" if ratio <= LATENCY_RATIO_GOAL else "misses"
    print(
        f"ratio env/raw: {ratio:.2f} ({verdict} the goal <= {LATENCY_RATIO_GOAL}); "
        f"env/raw-from-sync-code: {sync_ratio:.2f} "
        f"(best of {arguments.rounds} interleaved rounds of {len(times['env'])} calls)"
    )
    figures = concurrent_run(arguments.envs, arguments.steps_per_env)
    print(
        f"{figures['envs']} concurrent envs: {figures['server_processes']} server process(es), "
        f"made in {figures['make_all_s']:.2f} s, {figures['calls']} calls, "
        f"{figures['failures']} failures, {figures['calls_per_s']:.0f} calls/s, "
        f"p50 {figures['p50_ms']:.1f} ms, p95 {figures['p95_ms']:.1f} ms, "
        f"{figures['leftover_servers']} server(s) left after close"
    )
    if arguments.json:
        print(
            json.dumps(
                {
                    **{f"{name}_median_ms": 1000 * value for name, value in medians.items()},
                    "ratio": ratio,
                    "sync_ratio": sync_ratio,
                    **figures,
                }
            )
        )
    return 0 if figures["failures"] == 0 and figures["leftover_servers"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
