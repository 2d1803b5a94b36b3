"""Sandbox throughput: executions per second and p50/p99 latency of one small Python test run,
for bwrap, Docker with a fresh container per run (cold) and Docker's warm pool, in one run.

    python benchmarks/sandbox_throughput.py [--runs 60] [--rounds 6] [--concurrency 1]
                                            [--json out.json]

Needs bubblewrap, a running Docker engine and the sandbox image
(bash scripts/services.sh). Goals: bwrap >= 20x Docker cold; warm pool >= 5x cold.

Every mode runs the identical request. The runs are split into rounds and each round runs a
block of every mode in a shuffled order, so a change in the machine's load (other jobs on a
shared machine) hits all modes alike instead of whichever happened to run at that moment.
"Docker cold" is a real cold start: each run creates, starts, uses and removes its own
container inside the measured time (checked below); the ratios are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from rllm_envs.code.harness import request_for_test
from rllm_envs.sandbox import SandboxPolicy, make_sandbox

# A typical grading run, exactly as rllm/Code-v0 makes it for one stdin/stdout test: start
# Python, read stdin, compute, print.
PROGRAM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"
REQUEST = request_for_test({"style": "stdio"}, PROGRAM, {"input": "1 2 3 4\n"})
EXPECTED = "10\n"

MODES = {
    "bwrap": ("bwrap", {}),
    "docker_cold": ("docker", {"pool_size": 0}),
    "docker_warm": ("docker", {"pool_size": 4}),
}


@dataclass(frozen=True)
class Measurement:
    mode: str
    runs: int
    executions_per_second: float
    p50_ms: float
    p99_ms: float


@dataclass
class Tally:
    """What one mode has measured so far, over all rounds."""

    latencies: list[float] = field(default_factory=list)
    busy_seconds: float = 0.0

    def measurement(self, mode: str) -> Measurement:
        return Measurement(
            mode,
            len(self.latencies),
            len(self.latencies) / self.busy_seconds,
            statistics.median(self.latencies) * 1000,
            percentile(self.latencies, 0.99) * 1000,
        )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def timed_run(mode: str, sandbox: Any) -> float:
    started = time.perf_counter()
    result = sandbox.run(REQUEST)
    elapsed = time.perf_counter() - started
    if result.stdout != EXPECTED:
        raise RuntimeError(f"{mode}: unexpected result {result}")
    return elapsed


def run_block(mode: str, sandbox: Any, runs: int, concurrency: int, tally: Tally) -> None:
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tally.latencies += pool.map(lambda _: timed_run(mode, sandbox), range(runs))
    tally.busy_seconds += time.perf_counter() - started


def check_cold_starts(sandbox: Any, runs: int) -> None:
    """Each cold run must have created its own container and removed it before returning."""
    if sandbox.containers_created != runs or sandbox.container_ids:
        raise RuntimeError(
            f"docker_cold was not cold: {sandbox.containers_created} containers for {runs} "
            f"runs, {len(sandbox.container_ids)} still present"
        )


def measure_all(runs: int, rounds: int, concurrency: int, seed: int = 0) -> dict[str, Measurement]:
    sandboxes: dict[str, Any] = {}
    tallies = {mode: Tally() for mode in MODES}
    warm_up = 3  # caches, and the pool's first containers
    try:
        for mode, (backend, options) in MODES.items():
            sandboxes[mode] = make_sandbox(backend, SandboxPolicy(), **options)
            for _ in range(warm_up):
                timed_run(mode, sandboxes[mode])
        order = list(MODES)
        shuffle = random.Random(seed).shuffle
        for round_index in range(rounds):
            block = runs // rounds + (round_index < runs % rounds)
            shuffle(order)
            for mode in order:
                run_block(mode, sandboxes[mode], block, concurrency, tallies[mode])
        check_cold_starts(sandboxes["docker_cold"], warm_up + runs)
    finally:
        for sandbox in sandboxes.values():
            sandbox.close()
    return {mode: tally.measurement(mode) for mode, tally in tallies.items()}


def ratios_of(results: dict[str, Measurement]) -> dict[str, float]:
    cold, bwrap, warm = results["docker_cold"], results["bwrap"], results["docker_warm"]
    return {
        "bwrap_vs_docker_cold": bwrap.executions_per_second / cold.executions_per_second,
        "warm_pool_vs_docker_cold": warm.executions_per_second / cold.executions_per_second,
        "bwrap_vs_docker_cold_p50": cold.p50_ms / bwrap.p50_ms,
        "warm_pool_vs_docker_cold_p50": cold.p50_ms / warm.p50_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60, help="measured runs of each mode")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved blocks per mode")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--json", help="also write the results to this file")
    arguments = parser.parse_args()
    if arguments.runs < 1 or not 1 <= arguments.rounds <= arguments.runs:
        parser.error("need runs >= 1 and 1 <= rounds <= runs")
    load_before = os.getloadavg()[0]
    results = measure_all(arguments.runs, arguments.rounds, arguments.concurrency)
    load_after = os.getloadavg()[0]
    ratios = ratios_of(results)
    print(f"{'mode':<12} {'exec/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'x cold':>7}")
    cold_rate = results["docker_cold"].executions_per_second
    for row in results.values():
        print(
            f"{row.mode:<12} {row.executions_per_second:8.1f} {row.p50_ms:8.1f} "
            f"{row.p99_ms:8.1f} {row.executions_per_second / cold_rate:6.1f}x"
        )
    print(
        f"bwrap / docker cold: {ratios['bwrap_vs_docker_cold']:.1f}x exec/s, "
        f"{ratios['bwrap_vs_docker_cold_p50']:.1f}x p50 (goal 20x); "
        f"warm pool / docker cold: {ratios['warm_pool_vs_docker_cold']:.1f}x exec/s, "
        f"{ratios['warm_pool_vs_docker_cold_p50']:.1f}x p50 (goal 5x)"
    )
    print(
        f"{os.cpu_count()} CPUs, load average {load_before:.1f} before / {load_after:.1f} after, "
        f"concurrency {arguments.concurrency}, {arguments.rounds} interleaved rounds"
    )
    if arguments.json:
        with open(arguments.json, "w") as handle:
            payload = {
                "results": [asdict(row) for row in results.values()],
                "ratios": ratios,
                "concurrency": arguments.concurrency,
                "rounds": arguments.rounds,
                "load_average": [load_before, load_after],
            }
            json.dump(payload, handle, indent=2)


if __name__ == "__main__":
    main()
