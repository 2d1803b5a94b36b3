"""256 rllm/MCP-v0 envs stepped on one event loop through ``astep`` against the thread path.

    python benchmarks/async_envs.py [--envs 256] [--steps 10] [--rounds 3]
        [--engine-turns 4] [--swe-envs 0] [--json]

Both sides run the same envs (the shipped retrieval server over stdio, one server process that
every env of the process shares) and the same action (an ``open_document`` tool call) through
the execution engine's own env slots (:class:`rllm_agents.execution.env_slot.EnvSlot`):

* ``thread``: ``env_calls="thread"``, the engine's path for envs without native async: each
  env lives on its own worker thread and every ``env.step`` blocks that thread until the tool
  call comes back from the server manager's loop;
* ``native``: ``env_calls="auto"``, which plays these envs through ``areset`` / ``astep``: each
  step is awaited on the caller's event loop, no thread per env or per call.

1. Steps: each of ``--envs`` envs plays ``--steps`` tool calls, all envs at once. Printed per
   side: wall time, steps/s, p50/p95 step latency, process CPU seconds, the peak number of
   threads (sampled every 2 ms on the loop) and the peak RSS of the process (``VmHWM``; the
   server process is the same for both sides and not counted), and the ratios thread/native.
2. Engine: the execution engine plays ``--envs`` episodes at once (``n_parallel`` = envs) of
   ``--engine-turns`` turns each against a loopback model server that answers every request at
   once with the same tool call; wall time, peak threads and peak RSS per side.
3. SWE (with ``--swe-envs N``): N ``rllm/SWE-v0`` envs, one container each (the toolz task),
   ``--steps`` bash commands each (``git status --short``), all at once, as in part 1: the
   native side reads each command's reply off the container's stream on the loop.

Every side runs in a fresh child process, so that threads and memory of one side do not stay
for the other; the sides alternate, ``--rounds`` times, and each side's fastest round counts
(every round is printed). Each child checks every observation and that no server process is
left after its envs are closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mcp_overhead import server_processes  # this folder is on the path of a script run

ACTION = '<tool_call>{"name": "open_document", "arguments": {"doc_id": "person-09"}}</tool_call>'
EXPECTED = "Sekrous Pirkdrifur"  # in the document the call opens
SWE_ACTION = (
    '<tool_call>{"name": "bash", "arguments": {"command": "git status --short"}}</tool_call>'
)
SWE_REPO = "toolz"  # a small repository image
POLICIES = {"thread": "thread", "native": "auto"}  # side -> env_calls
SAMPLE_SECONDS = 0.002


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def rss_peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class ThreadPeak:
    """The most threads alive at once while it runs (sampled on the event loop)."""

    def __init__(self) -> None:
        self.peak = threading.active_count()
        self._task: asyncio.Task | None = None

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, threading.active_count())
            await asyncio.sleep(SAMPLE_SECONDS)

    def __enter__(self) -> ThreadPeak:
        self._task = asyncio.get_running_loop().create_task(self._sample())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.peak = max(self.peak, threading.active_count())
        if self._task is not None:
            self._task.cancel()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def make_env() -> Any:
    from rllm_envs.mcp import MCPEnv

    return MCPEnv(max_turns=1000)


def make_swe_env() -> Any:
    import gymnasium as gym
    from rllm_envs.swe.tasks import load_swe_tasks

    rows = [dict(row) for row in load_swe_tasks(None, "train").rows if row["repo"] == SWE_REPO]
    return gym.make("rllm/SWE-v0", tasks=rows[:1], pool_spares=0, max_turns=1000)


# part -> (env factory, action, text every observation holds)
STEP_PARTS: dict[str, tuple[Any, str, str]] = {
    "steps": (make_env, ACTION, EXPECTED),
    "swe": (make_swe_env, SWE_ACTION, "exit code: 0"),
}


async def steps_side(policy: str, part: str, envs: int, steps: int) -> dict[str, Any]:
    from rllm_agents.execution.env_slot import EnvSlot, FactoryProbe

    factory, action, expected = STEP_PARTS[part]
    probe = FactoryProbe()
    slots = [EnvSlot(factory, f"rllm-env-{index}", policy, probe) for index in range(envs)]
    latencies: list[float] = []
    failures = 0

    async def play(slot: EnvSlot) -> None:
        nonlocal failures
        for _ in range(steps):
            started = time.perf_counter()
            observation, *_, info = await slot.call("step", action)
            latencies.append(time.perf_counter() - started)
            failures += int(expected not in observation or "failure" in info)

    try:
        # Made and reset before the clock starts (the server starts with the first env).
        await asyncio.gather(*(slot.call("reset", seed=index) for index, slot in enumerate(slots)))
        modes = sorted({slot.mode for slot in slots})
        cpu = cpu_seconds()
        with ThreadPeak() as threads:
            started = time.perf_counter()
            await asyncio.gather(*(play(slot) for slot in slots))
            wall = time.perf_counter() - started
        cpu = cpu_seconds() - cpu
    finally:
        await asyncio.gather(*(slot.aclose() for slot in slots))
    return {
        "modes": modes,
        "steps": len(latencies),
        "failures": failures,
        "wall_s": wall,
        "steps_per_s": len(latencies) / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * percentile(latencies, 0.95),
        "cpu_s": cpu,
        "peak_threads": threads.peak,
    }


async def engine_side(policy: str, envs: int, turns: int) -> dict[str, Any]:
    from rllm_agents.agents.tool_agent import ToolAgent
    from rllm_agents.engines.openai import OpenAIEngine
    from rllm_agents.execution import AgentExecutionEngine
    from rllm_agents.testing.fault_server import FaultServer

    held = make_env()  # starts the server the engine's envs share, before the clock starts
    with FaultServer(completion=ACTION) as server:
        client = OpenAIEngine(server.base_url, "canned", max_retries=0)
        engine = AgentExecutionEngine(
            ToolAgent,
            make_env,
            client,
            n_parallel=envs,
            max_turns=turns,
            progress=False,
            env_calls=policy,
        )
        tasks = [{"question": "Where was Sekrous Pirkdrifur born?", "answer": "Kreaxreas"}]
        try:
            with ThreadPeak() as threads:
                started = time.perf_counter()
                episodes = await engine.execute_tasks(tasks * envs)
                wall = time.perf_counter() - started
        finally:
            await client.aclose()
            held.close()
    turns_played = sum(len(episode.trajectories[0].steps) for episode in episodes)
    failed = sum(
        episode.termination_reason.value not in ("max_turns", "env_truncated")
        for episode in episodes
    )
    return {
        "episodes": len(episodes),
        "turns": turns_played,
        "failed_episodes": failed,
        "wall_s": wall,
        "turns_per_s": turns_played / wall,
        "peak_threads": threads.peak,
    }


def child(side: str, part: str, envs: int, steps: int, turns: int) -> dict[str, Any]:
    import rllm_envs  # noqa: F401 - imports and registration before the memory baseline

    policy = POLICIES[side]
    rss_before = rss_peak_mb()
    if part in STEP_PARTS:
        figures = asyncio.run(steps_side(policy, part, envs, steps))
    else:
        figures = asyncio.run(engine_side(policy, envs, turns))
    figures.update(
        side=side,
        part=part,
        rss_before_mb=rss_before,
        rss_peak_mb=rss_peak_mb(),
        leftover_servers=server_processes(),
    )
    return figures


def run_child(side: str, part: str, arguments: argparse.Namespace) -> dict[str, Any]:
    envs = arguments.swe_envs if part == "swe" else arguments.envs
    command = [
        sys.executable,
        __file__,
        f"--child={side}",
        f"--part={part}",
        f"--envs={envs}",
        f"--steps={arguments.steps}",
        f"--engine-turns={arguments.engine_turns}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{side}/{part} failed:\n{result.stdout[-2000:]}{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def best_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest round: on a shared machine, load from other work only ever slows a round."""
    return min(rounds, key=lambda figures: figures["wall_s"])


def report(part: str, sides: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    best = {side: best_round(rounds) for side, rounds in sides.items()}
    rate = "turns_per_s" if part == "engine" else "steps_per_s"
    for side, figures in best.items():
        line = (
            f"{part:6} {side:7} wall {figures['wall_s']:6.2f} s  {figures[rate]:7.0f} {rate[:5]}/s"
            f"  threads {figures['peak_threads']:4d}  RSS {figures['rss_peak_mb']:6.0f} MB"
        )
        if part != "engine":
            line += (
                f"  p50 {figures['p50_ms']:6.1f} ms  p95 {figures['p95_ms']:6.1f} ms"
                f"  CPU {figures['cpu_s']:5.2f} s  modes {','.join(figures['modes'])}"
            )
        print(line)
    thread, native = best["thread"], best["native"]
    ratios = {
        "wall": thread["wall_s"] / native["wall_s"],
        "threads": thread["peak_threads"] / native["peak_threads"],
        "rss": thread["rss_peak_mb"] / native["rss_peak_mb"],
    }
    if part != "engine":
        ratios["cpu"] = thread["cpu_s"] / native["cpu_s"]
    print(f"{part:6} thread/native: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    walls = {side: [round(r["wall_s"], 2) for r in rounds] for side, rounds in sides.items()}
    print(f"{part:6} every round's wall time (s): {walls}")
    return {"thread": thread, "native": native, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10, help="tool calls per env (part 1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine-turns", type=int, default=4, help="0 skips part 2")
    parser.add_argument(
        "--swe-envs", type=int, default=0, help="part 3, rllm/SWE-v0 envs (0: skipped)"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--child", choices=sorted(POLICIES), help=argparse.SUPPRESS)
    parser.add_argument("--part", choices=(*STEP_PARTS, "engine"), help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.child:
        print(
            json.dumps(
                child(
                    arguments.child,
                    arguments.part,
                    arguments.envs,
                    arguments.steps,
                    arguments.engine_turns,
                )
            )
        )
        return 0

    parts = ["steps"] + (["engine"] if arguments.engine_turns > 0 else [])
    parts += ["swe"] if arguments.swe_envs > 0 else []
    figures: dict[str, Any] = {}
    problems = 0
    print(f"{arguments.envs} envs, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for part in parts:
        sides: dict[str, list[dict[str, Any]]] = {"thread": [], "native": []}
        for round_index in range(arguments.rounds):
            order = ("thread", "native") if round_index % 2 == 0 else ("native", "thread")
            for side in order:
                result = run_child(side, part, arguments)
                problems += result.get("failures", 0) + result.get("failed_episodes", 0)
                problems += result["leftover_servers"]
                sides[side].append(result)
        figures[part] = report(part, sides)
    if arguments.json:
        print(json.dumps(figures))
    return 0 if problems == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
