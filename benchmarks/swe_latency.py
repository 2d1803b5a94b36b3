"""Latency of rllm/SWE-v0: reset (cold and from the warm pool), command steps, evaluation, and
N envs in parallel.

    python benchmarks/swe_latency.py [--split test] [--episodes 8] [--steps 20] [--envs 8]

1. Cold resets: ``pool_spares=0``, every reset starts its container, then puts the repository
   at the task's state (reverse gold patch, hidden tests removed, one-commit git repository).
2. Warm resets: ``pool_spares=1``; before each reset the benchmark waits until the spare
   container of that image is started (as it is when a model spends seconds on its reply), so
   the reset only takes it and prepares the repository.
3. Steps: ``--steps`` bash commands (``ls``, ``git status``, ``grep``...) and file-tool calls
   (view, search, str_replace), each timed around ``env.step``.
4. Evaluation: the gold agent's ``submit`` (diff out of the agent's container, a fresh
   container, patch, hidden tests, report) on ``--episodes`` instances; the reward must be 1.0.
5. ``--envs`` envs on threads in one process, each playing the gold agent on its own instances:
   episodes, failures (an env failure or a reward other than 1.0), wall time.

Goals: warm reset p50 <= 1 s, step p50 <= 100 ms, evaluation p50 <= 10 s, no failure with 8
envs in parallel. The machine's load average is printed: on a shared 2-core machine the
figures move with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

import gymnasium as gym
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.swe.integrity import bash, call, play
from rllm_envs.swe.tasks import load_swe_tasks

WARM_RESET_GOAL = 1.0
STEP_GOAL = 0.100
EVALUATION_GOAL = 10.0


def p50(values: list[float]) -> float:
    return statistics.median(values)


def describe(name: str, values: list[float], goal: float | None = None) -> str:
    line = f"{name:28s} p50 {p50(values) * 1000:8.1f} ms   max {max(values) * 1000:8.1f} ms"
    line += f"   (n={len(values)})"
    if goal is not None:
        line += f"   goal <= {goal * 1000:.0f} ms: {'met' if p50(values) <= goal else 'NOT met'}"
    return line


def wait_for_spare(env: Any, image: str, timeout: float = 60.0) -> None:
    pool = env.unwrapped.pool
    deadline = time.monotonic() + timeout
    pool.prewarm(image)
    while time.monotonic() < deadline:
        with pool._lock:
            if pool._ready.get(image):
                return
        time.sleep(0.05)
    raise RuntimeError(f"no spare container of {image} within {timeout} s")


def timed_resets(rows: list[dict[str, Any]], spares: int) -> list[float]:
    env = gym.make("rllm/SWE-v0", tasks=rows, pool_spares=spares)
    times = []
    try:
        for row in rows:
            if spares:
                wait_for_spare(env, row["image_name"])
            started = time.perf_counter()
            _, info = env.reset(options={"task": row})
            times.append(time.perf_counter() - started)
            if "failure" in info:
                raise RuntimeError(f"reset failed: {info}")
    finally:
        env.close()
    return times


STEP_ACTIONS = (
    bash("ls"),
    bash("git status --short"),
    bash("grep -rn 'def ' --include=*.py . | wc -l"),
    bash("python3 -c 'print(1 + 1)'"),
    call("view", path="."),
    call("search", pattern="return"),
)


def timed_steps(row: dict[str, Any], count: int) -> tuple[list[float], list[float]]:
    env = gym.make("rllm/SWE-v0", tasks=[row], max_turns=count + 10)
    commands, tools = [], []
    try:
        env.reset(seed=0)
        for index in range(count):
            action = STEP_ACTIONS[index % len(STEP_ACTIONS)]
            started = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            elapsed = time.perf_counter() - started
            (commands if '"bash"' in action else tools).append(elapsed)
            if terminated or truncated or not info.get("action_valid", True):
                raise RuntimeError(f"step failed: {info}")
    finally:
        env.close()
    return commands, tools


def timed_evaluations(rows: list[dict[str, Any]]) -> list[float]:
    env = gym.make("rllm/SWE-v0", tasks=rows)
    times = []
    try:
        for row in rows:
            env.reset(options={"task": row})
            env.step(call("create", path="/tmp/fix.patch", content=row["patch"]))
            env.step(bash("git apply /tmp/fix.patch"))
            started = time.perf_counter()
            _, reward, _, _, info = env.step(call("submit"))
            times.append(time.perf_counter() - started)
            if reward != 1.0:
                raise RuntimeError(f"gold patch not resolved: {info.get('reason')}")
    finally:
        env.close()
    return times


def parallel(rows: list[dict[str, Any]], envs: int, per_env: int) -> dict[str, Any]:
    results: list[tuple[float, str | None]] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        mine = [rows[(index * per_env + k) % len(rows)] for k in range(per_env)]
        env = gym.make("rllm/SWE-v0", tasks=mine)
        try:
            for row in mine:
                played = play(env, row, "gold")
                with lock:
                    results.append((played.reward, played.failure))
        except Exception as error:  # counted, not raised: the figure is how many failed
            with lock:
                results.append((0.0, f"{type(error).__name__}: {error}"))
        finally:
            env.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(envs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    failures = [r for r in results if r[1] is not None or r[0] != 1.0]
    return {"episodes": len(results), "failures": len(failures), "wall": wall, "bad": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="test")
    parser.add_argument("--episodes", type=int, default=8, help="instances per part")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--episodes-per-env", type=int, default=2)
    args = parser.parse_args()
    rows = [dict(row) for row in load_swe_tasks(None, args.split).rows]
    # Spread over the split's projects.
    rows = [rows[i * len(rows) // args.episodes] for i in range(min(args.episodes, len(rows)))]
    print(f"rllm/SWE-v0 latency on {len(rows)} {args.split} instances; load {os.getloadavg()}")

    cold = timed_resets(rows, spares=0)
    print(describe("reset, cold", cold))
    warm = timed_resets(rows, spares=1)
    print(describe("reset, warm pool", warm, WARM_RESET_GOAL))
    commands, tools = timed_steps(rows[0], args.steps)
    print(describe("step, bash command", commands, STEP_GOAL))
    print(describe("step, file tool", tools, STEP_GOAL))
    evaluations = timed_evaluations(rows)
    print(describe("evaluation (submit)", evaluations, EVALUATION_GOAL))
    print(f"cold/warm reset p50 ratio: {p50(cold) / p50(warm):.1f}x")

    result = parallel(rows, args.envs, args.episodes_per_env)
    print(
        f"{args.envs} envs in parallel: {result['episodes']} gold episodes in "
        f"{result['wall']:.1f} s, {result['failures']} failures"
        + (f" {result['bad'][:3]}" if result["bad"] else "")
    )
    print(f"load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
