"""Sandbox throughput: executions per second and p50/p99 latency of one small Python run,
for bwrap, Docker with a fresh container per run (cold) and Docker's warm pool, in one run.

    python benchmarks/sandbox_throughput.py [--runs 60] [--concurrency 1] [--json out.json]

Needs bubblewrap, a running Docker engine and the sandbox image
(bash scripts/services.sh). Goals: bwrap >= 20x Docker cold; warm pool >= 5x cold.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from rllm_envs.sandbox import ExecutionRequest, SandboxPolicy, make_sandbox

# A typical grading run: start Python, read stdin, compute, print.
PROGRAM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"
REQUEST = ExecutionRequest(
    ("python3", "main.py"), files={"main.py": PROGRAM.encode()}, stdin=b"1 2 3 4\n"
)

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


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def measure(mode: str, runs: int, concurrency: int) -> Measurement:
    backend, options = MODES[mode]
    sandbox = make_sandbox(backend, SandboxPolicy(), **options)

    def one(_: int) -> float:
        started = time.perf_counter()
        result = sandbox.run(REQUEST)
        if result.stdout != "10\n":
            raise RuntimeError(f"{mode}: unexpected result {result}")
        return time.perf_counter() - started

    try:
        for _ in range(3):  # warm up: caches, and the pool's first containers
            one(0)
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            latencies = list(pool.map(one, range(runs)))
        elapsed = time.perf_counter() - started
    finally:
        sandbox.close()
    return Measurement(
        mode,
        runs,
        runs / elapsed,
        statistics.median(latencies) * 1000,
        percentile(latencies, 0.99) * 1000,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--json", help="also write the results to this file")
    arguments = parser.parse_args()
    results = {mode: measure(mode, arguments.runs, arguments.concurrency) for mode in MODES}
    print(f"{'mode':<12} {'exec/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for row in results.values():
        print(
            f"{row.mode:<12} {row.executions_per_second:8.1f} {row.p50_ms:8.1f} {row.p99_ms:8.1f}"
        )
    cold = results["docker_cold"].executions_per_second
    ratios = {
        "bwrap_vs_docker_cold": results["bwrap"].executions_per_second / cold,
        "warm_pool_vs_docker_cold": results["docker_warm"].executions_per_second / cold,
    }
    print(
        f"bwrap / docker cold: {ratios['bwrap_vs_docker_cold']:.1f}x (goal 20x); "
        f"warm pool / docker cold: {ratios['warm_pool_vs_docker_cold']:.1f}x (goal 5x)"
    )
    if arguments.json:
        with open(arguments.json, "w") as handle:
            payload = {"results": [asdict(row) for row in results.values()], "ratios": ratios}
            json.dump({**payload, "concurrency": arguments.concurrency}, handle, indent=2)


if __name__ == "__main__":
    main()
