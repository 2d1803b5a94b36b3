"""Scale-out on Ray: what a remote episode costs, how throughput grows with workers, and what a
dead node costs - all on one local multi-node Ray cluster (``ray.cluster_utils.Cluster``).

    python benchmarks/ray_scaleout.py [--quick] [--json]

The model is the loopback canned server of ``engine_throughput.py`` in a child process; the
agent always answers "Left", which on the default FrozenLake lakes never moves the player, so
every episode runs exactly its turn limit. Printed side by side, in one run:

1. Overhead per step. The same sequential episodes (``--overhead-turns`` turns each, one at a
   time, instant model) in this process and on one Ray worker, rounds interleaved, median of
   the per-round differences divided by the steps (goal <= 0.2 ms per step). For scale, the
   cost of one remote ``env.step`` on an actor, the design not taken.
2. Throughput against workers. I/O-bound envs - each step blocks ``--step-latency`` seconds, as
   a sandbox call does, and the model answers after ``--latency`` - with ``--envs-per-worker``
   envs on each worker (what one machine hosts), on 1, 2 and 4 workers; steps/s and the
   speed-up over one worker (goals >= 1.8x with 2, >= 3x with 4). Each worker count is timed
   on warm workers, best of ``--rounds``.
3. A node killed. The same run on 4 workers without and with a worker node killed at 30 % of
   the run (the cluster keeps spare room, where the lost workers are replaced); episodes lost,
   episodes duplicated and the extra wall time (goal: 0, 0, <= +3 s).

Every worker node reports to the head within Ray's fast health check
(``rllm_agents.execution.ray_executor.FAST_NODE_DEATH``). The machine's load average is
printed with the results: on a shared machine the times are noisy, the ratios less so.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
import rllm_envs  # noqa: E402, F401 - registers the env ids
from engine_throughput import CannedServer  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from rllm_agents.agents import FrozenLakeAgent  # noqa: E402
from rllm_agents.engines.base import SamplingParams  # noqa: E402
from rllm_agents.engines.openai import OpenAIEngine  # noqa: E402
from rllm_agents.execution import AgentExecutionEngine  # noqa: E402
from rllm_agents.execution.env_spec import EnvSpec  # noqa: E402
from rllm_agents.execution.ray_executor import FAST_NODE_DEATH, RayExecutor  # noqa: E402
from rllm_agents.types import TerminationReason  # noqa: E402

OVERHEAD_GOAL_MS = 0.2
SPEEDUP_GOALS = {2: 1.8, 4: 3.0}
KILL_GOAL_EXTRA_S = 3.0
# The lake's own move limit (2 * size**2: 18 on a 3x3 lake) stays above every run's turn limit,
# so each episode ends at the engine's max_turns and every run plays the same number of steps.
LAKE = {"max_turns": 1_000}
NODE = {"num_cpus": 2, "resources": {"rollout": 2}}  # two workers per node


class BlockingLake(gym.Wrapper):
    """FrozenLake whose every step waits, as an env waiting on a sandbox or a browser does."""

    def __init__(self, env: gym.Env, step_s: float) -> None:
        super().__init__(env)
        self.step_s = step_s

    def step(self, action):
        time.sleep(self.step_s)
        return self.env.step(action)


def blocking_lake(step_s: float) -> gym.Env:
    return BlockingLake(gym.make("rllm/FrozenLake-v0", **LAKE), step_s)


def engine_for(server: CannedServer, env_factory, executor, parallel: int, turns: int):
    return AgentExecutionEngine(
        FrozenLakeAgent,
        env_factory,
        OpenAIEngine(server.base_url, "canned", timeout=60, max_connections=1024),
        n_parallel=parallel,
        max_turns=turns,
        sampling=SamplingParams(max_tokens=8),
        progress=False,
        executor=executor,
    )


def timed_run(engine: AgentExecutionEngine, seeds: list[int], turns: int) -> float:
    """Wall seconds of one run; every episode must have played all its turns."""

    async def run():
        try:
            return await engine.execute_seeds(seeds)
        finally:
            await engine.engine.aclose()  # the driver's own connections (inline runs)

    started = time.perf_counter()
    episodes = asyncio.run(run())
    wall = time.perf_counter() - started
    short = [e for e in episodes if e.termination_reason != TerminationReason.MAX_TURNS]
    if len(episodes) != len(seeds) or short:
        raise RuntimeError(f"{len(short)} episodes did not play {turns} turns: {short[:1]}")
    return wall


# ---- 1. overhead per step -------------------------------------------------------------------
@ray.remote
class StepActor:
    """One env on an actor, stepped by remote calls (for the per-step comparison)."""

    def __init__(self) -> None:
        self.env = gym.make("rllm/FrozenLake-v0", **LAKE)

    def reset(self, seed: int) -> None:
        self.env.reset(seed=seed)

    def step(self, action: str):
        return self.env.step(action)[1:4]


def overhead(server: CannedServer, args: argparse.Namespace) -> dict:
    turns, episodes = args.overhead_turns, args.overhead_episodes
    seeds = list(range(episodes))
    spec = EnvSpec("rllm/FrozenLake-v0", LAKE)
    executor = RayExecutor(workers=1, resources={"rollout": 1})
    remote = engine_for(server, spec, executor, 1, turns)
    here = engine_for(server, spec, "inline", 1, turns)
    try:
        timed_run(remote, seeds[:2], turns)  # worker started, setup shipped
        timed_run(here, seeds[:2], turns)
        inline_s, ray_s = [], []
        for _ in range(args.rounds):
            inline_s.append(timed_run(here, seeds, turns))
            ray_s.append(timed_run(remote, seeds, turns))
    finally:
        remote.close()
    steps = episodes * turns
    per_round = [1000 * (r - i) / steps for i, r in zip(inline_s, ray_s, strict=True)]
    actor = StepActor.options(resources={"rollout": 1}).remote()
    ray.get(actor.reset.remote(0))
    started = time.perf_counter()
    for _ in range(args.remote_steps):
        ray.get(actor.step.remote("Left"))
    remote_step_ms = 1000 * (time.perf_counter() - started) / args.remote_steps
    ray.kill(actor)
    return {
        "turns_per_episode": turns,
        "episodes": episodes,
        "inline_ms_per_step": round(1000 * statistics.median(inline_s) / steps, 3),
        "ray_ms_per_step": round(1000 * statistics.median(ray_s) / steps, 3),
        "overhead_ms_per_step": round(statistics.median(per_round), 3),
        "overhead_rounds_ms": [round(x, 3) for x in per_round],
        "remote_env_step_ms": round(remote_step_ms, 3),
        "goal_ms": OVERHEAD_GOAL_MS,
    }


# ---- 2. throughput against workers ----------------------------------------------------------
def throughput(server: CannedServer, args: argparse.Namespace) -> list[dict]:
    factory = functools.partial(blocking_lake, args.step_latency)
    rows = []
    for workers in args.workers:
        parallel = workers * args.envs_per_worker
        seeds = list(range(parallel * args.episodes_per_env))
        executor = RayExecutor(workers=workers, resources={"rollout": 1})
        engine = engine_for(server, factory, executor, parallel, args.turns)
        try:
            timed_run(engine, seeds[:parallel], args.turns)  # workers up, envs made once
            walls = [timed_run(engine, seeds, args.turns) for _ in range(args.rounds)]
        finally:
            engine.close()
        steps = len(seeds) * args.turns
        rows.append(
            {
                "workers": workers,
                "envs": parallel,
                "episodes": len(seeds),
                "wall_s": round(min(walls), 3),
                "steps_per_s": round(steps / min(walls), 1),
                "rounds_wall_s": [round(w, 3) for w in walls],
            }
        )
    base = rows[0]["steps_per_s"]
    for row in rows:
        row["speedup"] = round(row["steps_per_s"] / base, 2)
        row["goal"] = SPEEDUP_GOALS.get(row["workers"])
    return rows


# ---- 3. a node killed -----------------------------------------------------------------------
def node_kill(cluster: Cluster, server: CannedServer, args: argparse.Namespace) -> dict:
    factory = functools.partial(blocking_lake, args.step_latency)
    workers = 4
    parallel = workers * args.envs_per_worker
    seeds = list(range(args.kill_episodes))
    executor = RayExecutor(workers=workers, resources={"rollout": 1})
    engine = engine_for(server, factory, executor, parallel, args.turns)
    try:
        timed_run(engine, seeds[:parallel], args.turns)
        baseline = timed_run(engine, seeds, args.turns)
        hosts = {worker.node_id for worker in executor.pool}
        victim = next(node for node in cluster.list_all_nodes() if node.node_id in hosts)
        killed_at: list[float] = []

        def kill() -> None:
            time.sleep(0.3 * baseline)
            killed_at.append(time.perf_counter())
            cluster.remove_node(victim, allow_graceful=False)

        killer = threading.Thread(target=kill, daemon=True)
        started = time.perf_counter()
        killer.start()
        episodes = engine.run(seeds=seeds)
        with_kill = time.perf_counter() - started
        killer.join()
    finally:
        engine.close()
    indices = [int(e.id.rsplit(":", 1)[1]) for e in episodes]
    completed = [e for e in episodes if e.termination_reason == TerminationReason.MAX_TURNS]
    return {
        "episodes": len(seeds),
        "workers": workers,
        "baseline_wall_s": round(baseline, 3),
        "killed_wall_s": round(with_kill, 3),
        "extra_s": round(with_kill - baseline, 3),
        "killed_at_s": round(killed_at[0] - started, 3) if killed_at else None,
        "lost": len(seeds) - len(completed),
        "duplicated": len(indices) - len(set(indices)),
        "workers_lost": engine.last_metrics.get("ray_workers_lost"),
        "episode_retries": engine.last_metrics.get("ray_episode_retries"),
        "goal_extra_s": KILL_GOAL_EXTRA_S,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.05, help="model answer (s)")
    parser.add_argument("--step-latency", type=float, default=0.05, help="env step (s)")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--envs-per-worker", type=int, default=32)
    parser.add_argument("--episodes-per-env", type=int, default=4)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--overhead-turns", type=int, default=20)
    parser.add_argument("--overhead-episodes", type=int, default=50)
    parser.add_argument("--remote-steps", type=int, default=500)
    parser.add_argument("--kill-episodes", type=int, default=1500)
    parser.add_argument("--quick", action="store_true", help="small sizes: checks it runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = parser.parse_args(argv)
    args.workers = [int(n) for n in args.workers.split(",")]
    if args.quick:
        args.envs_per_worker, args.episodes_per_env, args.rounds = 4, 1, 1
        args.overhead_turns, args.overhead_episodes, args.remote_steps = 5, 4, 20
        args.kill_episodes = 64

    started = time.perf_counter()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "_system_config": dict(FAST_NODE_DEATH)},
    )
    for _ in range(3):  # room for 6 workers: 4 run, 2 take over from a dead node's
        cluster.add_node(**NODE)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="warning")
    print(f"cluster: head + 3 nodes up in {time.perf_counter() - started:.1f}s")
    report: dict = {}
    try:
        with CannedServer(0.0, "Staying put: `Left`") as instant:
            report["overhead"] = o = overhead(instant, args)
        print(
            f"1. overhead: {o['inline_ms_per_step']:.3f} ms/step inline, "
            f"{o['ray_ms_per_step']:.3f} ms/step on a Ray worker -> "
            f"+{o['overhead_ms_per_step']:.3f} ms per step (goal <= {OVERHEAD_GOAL_MS}; "
            f"{o['turns_per_episode']}-turn episodes; rounds {o['overhead_rounds_ms']}); "
            f"one remote env.step instead: {o['remote_env_step_ms']:.3f} ms"
        )
        with CannedServer(args.latency, "Staying put: `Left`") as server:
            report["throughput"] = rows = throughput(server, args)
            print(
                f"2. throughput, I/O-bound envs (step {args.step_latency}s, model "
                f"{args.latency}s, {args.envs_per_worker} envs per worker):"
            )
            for row in rows:
                goal = f" (goal >= {row['goal']}x)" if row["goal"] else ""
                print(
                    f"   {row['workers']} worker(s) {row['envs']:>4} envs: "
                    f"{row['steps_per_s']:>8.1f} steps/s  {row['speedup']:.2f}x{goal}"
                    f"  rounds {row['rounds_wall_s']} s"
                )
            report["node_kill"] = k = node_kill(cluster, server, args)
            print(
                f"3. node killed at {k['killed_at_s']}s of {k['episodes']} episodes on "
                f"{k['workers']} workers: {k['lost']} lost, {k['duplicated']} duplicated, "
                f"{k['baseline_wall_s']}s -> {k['killed_wall_s']}s (+{k['extra_s']}s, goal "
                f"<= +{KILL_GOAL_EXTRA_S}s; {k['workers_lost']} workers lost, "
                f"{k['episode_retries']} episode retries)"
            )
    finally:
        ray.shutdown()
        cluster.shutdown()
    report["load_average"] = round(os.getloadavg()[0], 2)
    report["cpus"] = os.cpu_count()
    print(
        f"load average {report['load_average']} on {report['cpus']} CPUs (the head, three "
        "nodes, the latency server and this driver share them: on few cores times are noisy)"
    )
    if args.json:
        print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
