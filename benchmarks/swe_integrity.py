"""rllm/SWE-v0's reward over a whole split: the gold patch, doing nothing, and every cheat.

    python benchmarks/swe_integrity.py [--split test] [--agents gold,noop,...] [--envs 4]
        [--limit N]

Every instance of the split is played by every agent of ``rllm_envs.swe.integrity`` (gold,
no-op and the cheats), on ``--envs`` envs in parallel threads. For each agent: episodes, how
many scored 1.0, env failures, and leaks (a hidden test file, a fixed source file or its git
blob reachable from the agent's container). The goal: gold 1.0 on every instance; no-op and
every cheat 0.0 everywhere, no leak, no failure. Per-project counts are printed too.
"""

from __future__ import annotations

import argparse
import collections
import os
import queue
import threading
import time
from typing import Any

import gymnasium as gym
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.swe.integrity import AGENTS, leaks, play, secrets_for
from rllm_envs.swe.tasks import load_swe_tasks, to_swe_task


def run(rows: list[dict[str, Any]], agents: list[str], envs: int) -> list[dict[str, Any]]:
    jobs: queue.Queue = queue.Queue()
    for row in rows:
        jobs.put(row)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def worker() -> None:
        env = gym.make("rllm/SWE-v0", tasks=rows)
        try:
            while True:
                try:
                    row = jobs.get_nowait()
                except queue.Empty:
                    return
                secrets = secrets_for(env.unwrapped.pool, to_swe_task(row))
                for agent in agents:
                    played = play(env, row, agent, secrets)
                    found = leaks(played, secrets)
                    with lock:
                        results.append(
                            {
                                "agent": agent,
                                "repo": row["repo"],
                                "instance_id": row["instance_id"],
                                "reward": played.reward,
                                "failure": played.failure,
                                "leaks": found,
                                "reason": played.info.get("reason", ""),
                            }
                        )
        finally:
            env.close()

    threads = [threading.Thread(target=worker) for _ in range(envs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def report(results: list[dict[str, Any]], agents: list[str]) -> bool:
    ok = True
    print(f"{'agent':24s} {'episodes':>8s} {'reward 1.0':>10s} {'failures':>8s} {'leaks':>6s}")
    for agent in agents:
        mine = [r for r in results if r["agent"] == agent]
        solved = sum(r["reward"] == 1.0 for r in mine)
        failures = sum(r["failure"] is not None for r in mine)
        leaked = sum(bool(r["leaks"]) for r in mine)
        print(f"{agent:24s} {len(mine):8d} {solved:10d} {failures:8d} {leaked:6d}")
        wanted = len(mine) if agent == "gold" else 0
        ok = ok and solved == wanted and failures == 0 and leaked == 0
    print("\nper project (instances; gold solved; no-op and cheats scoring > 0)")
    by_repo: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for result in results:
        by_repo[result["repo"]].append(result)
    for repo, mine in sorted(by_repo.items()):
        instances = len({r["instance_id"] for r in mine})
        gold = sum(r["reward"] == 1.0 for r in mine if r["agent"] == "gold")
        others = sum(r["reward"] > 0 for r in mine if r["agent"] != "gold")
        print(f"  {repo:12s} {instances:4d} instances   gold {gold:4d}   others > 0: {others}")
    bad = [r for r in results if (r["reward"] == 1.0) != (r["agent"] == "gold") or r["leaks"]]
    for result in bad[:10]:
        print("UNEXPECTED", result)
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="test")
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--limit", type=int, default=None, help="first N instances only")
    args = parser.parse_args()
    agents = [name for name in args.agents.split(",") if name]
    unknown = sorted(set(agents) - set(AGENTS))
    if unknown:
        raise SystemExit(f"unknown agents {unknown}; choose from {sorted(AGENTS)}")
    rows = [dict(row) for row in load_swe_tasks(None, args.split).rows][: args.limit]
    print(
        f"rllm/SWE-v0 integrity: {len(rows)} {args.split} instances x {len(agents)} agents on "
        f"{args.envs} envs; load {os.getloadavg()}"
    )
    started = time.perf_counter()
    results = run(rows, agents, args.envs)
    ok = report(results, agents)
    print(
        f"\n{len(results)} episodes in {time.perf_counter() - started:.0f} s; load {os.getloadavg()}"
    )
    print("all as expected" if ok else "NOT as expected")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
