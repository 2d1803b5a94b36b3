"""What serving an env costs: rllm/FrozenLake-v0 played over ``rllm-envs serve`` (loopback
WebSocket, the server in its own process) against the same env played in-process.

    python benchmarks/serve_overhead.py [--steps 3000] [--sessions 256] [--seconds 10] [--uvloop]

Two figures, side by side in one run:

* **latency**: one session steps the served env, one message at a time; each step's
  round trip against the in-process ``env.step`` of the same actions. Goal: at most 1 ms
  added at the median.
* **throughput**: `--sessions` sessions at once, each playing episodes of random moves for
  `--seconds`; steps/s over the socket against the same number of envs stepped in-process by
  ``astep`` on one event loop (what the execution engine does with local envs). Goal: 90 %.
  Beside them, the ceiling of the transport itself: the same client against a bare aiohttp
  WebSocket server (its own process) that answers every message with a served step's reply
  and holds no env. No env server written on aiohttp can carry more steps/s than that.

The client is aiohttp in this process; the server is the installed command. ``--uvloop`` runs
the client, the server and the bare server on uvloop's event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import gymnasium as gym
import rllm_envs  # noqa: F401 - registers the ids
from rllm_envs.core.async_env import areset, astep

ENV_ID = "rllm/FrozenLake-v0"
MOVES = ("Left", "Down", "Right", "Up")
LATENCY_GOAL_MS = 1.0
THROUGHPUT_GOAL = 0.9
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# Run as `python -c`: the bare server (no env), answering every message with the reply given.
BARE_SERVER = """
import asyncio, json, sys
from aiohttp import web
reply = sys.argv[2]
async def session(request):
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for _ in ws:
        await ws.send_str(reply)
    return ws
app = web.Application()
app.router.add_get("/ws", session)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda _: print("serving", flush=True))
"""
UVLOOP_FIRST = "import asyncio, uvloop; asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())\n"


def a_step_reply() -> dict:
    """A served step's reply as rllm-envs serve sends it: the bare server answers with this, so
    both servers send messages of the same size."""
    from rllm_envs.serve.protocol import turn_body
    from rllm_envs.serve.sessions import Turn

    env = gym.make(ENV_ID)
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(MOVES[0])
    env.close()
    turn = Turn(observation, info, float(reward), terminated, truncated)
    return {"type": "observation", "data": turn_body(turn)}


def start_server(
    max_sessions: int, uvloop: bool, bare: bool = False
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    prefix = UVLOOP_FIRST if uvloop else ""
    if bare:
        program = prefix + BARE_SERVER
        arguments = [str(port), json.dumps(a_step_reply())]
    else:
        program = prefix + "import sys; from rllm_envs.__main__ import main; sys.exit(main())"
        arguments = ["serve", ENV_ID, "--port", str(port), "--max-sessions", str(max_sessions)]
    process = subprocess.Popen(
        [sys.executable, "-c", program, *arguments],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    line = process.stdout.readline()
    if "serving" not in line:
        raise RuntimeError(f"the server did not start: {line}{process.stdout.read()}")
    return process, f"http://127.0.0.1:{port}/ws"


def stop_server(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    process.stdout.close()


def in_process_step_seconds(actions: list[str]) -> list[float]:
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    times = []
    for action in actions:
        started = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        times.append(time.perf_counter() - started)
        if terminated or truncated:
            env.reset()
    env.close()
    return times


async def served_step_seconds(url: str, actions: list[str]) -> list[float]:
    times = []
    async with aiohttp.ClientSession() as client, client.ws_connect(url) as ws:
        await ws.send_json({"type": "reset", "data": {"seed": 0}})
        await ws.receive_json()
        for action in actions:
            started = time.perf_counter()
            await ws.send_json({"type": "step", "data": {"text": action}})
            reply = await ws.receive_json()
            times.append(time.perf_counter() - started)
            if reply["data"]["done"]:
                await ws.send_json({"type": "reset", "data": {}})
                await ws.receive_json()
    return times


async def served_throughput(url: str, sessions: int, seconds: float) -> float:
    deadline = time.perf_counter() + seconds
    counts = [0] * sessions

    async def play(index: int, client: aiohttp.ClientSession) -> None:
        draw = random.Random(index)
        async with client.ws_connect(url) as ws:
            await ws.send_json({"type": "reset", "data": {"seed": index}})
            await ws.receive_json()
            while time.perf_counter() < deadline:
                await ws.send_json({"type": "step", "data": {"text": draw.choice(MOVES)}})
                reply = await ws.receive_json()
                counts[index] += 1
                if reply["data"]["done"]:
                    await ws.send_json({"type": "reset", "data": {}})
                    await ws.receive_json()

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as client:
        started = time.perf_counter()
        await asyncio.gather(*(play(index, client) for index in range(sessions)))
        return sum(counts) / (time.perf_counter() - started)


async def in_process_throughput(sessions: int, seconds: float) -> float:
    deadline = time.perf_counter() + seconds
    counts = [0] * sessions
    envs = [gym.make(ENV_ID) for _ in range(sessions)]

    async def play(index: int) -> None:
        draw, env = random.Random(index), envs[index]
        await areset(env, seed=index)
        while time.perf_counter() < deadline:
            _, _, terminated, truncated, _ = await astep(env, draw.choice(MOVES))
            counts[index] += 1
            if terminated or truncated:
                await areset(env)

    started = time.perf_counter()
    await asyncio.gather(*(play(index) for index in range(sessions)))
    elapsed = time.perf_counter() - started
    for env in envs:
        env.close()
    return sum(counts) / elapsed


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--uvloop", action="store_true", help="every side on uvloop's loop")
    args = parser.parse_args()
    if args.uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    actions = [random.Random(0).choice(MOVES) for _ in range(args.steps)]
    local = in_process_step_seconds(actions)
    process, url = start_server(max(args.sessions, 1), args.uvloop)
    try:
        served = asyncio.run(served_step_seconds(url, actions))
        served_rate = asyncio.run(served_throughput(url, args.sessions, args.seconds))
    finally:
        stop_server(process)
    process, url = start_server(max(args.sessions, 1), args.uvloop, bare=True)
    try:
        bare_rate = asyncio.run(served_throughput(url, args.sessions, args.seconds))
    finally:
        stop_server(process)
    local_rate = asyncio.run(in_process_throughput(args.sessions, args.seconds))

    print(f"{ENV_ID}, {args.steps} steps one at a time (ms per step):")
    print(f"{'':24}{'p50':>9}{'p90':>9}{'p99':>9}")
    for name, times in (("in-process env.step", local), ("served, round trip", served)):
        row = "".join(f"{percentile(times, q) * 1e3:9.3f}" for q in (0.5, 0.9, 0.99))
        print(f"{name:24}{row}")
    added = (statistics.median(served) - statistics.median(local)) * 1e3
    print(f"added at the median: {added:.3f} ms (goal <= {LATENCY_GOAL_MS} ms)")
    print(f"\n{args.sessions} sessions at once for {args.seconds:g} s (steps/s):")
    print(f"  in-process (astep, one loop): {local_rate:10.0f}")
    print(f"  served (loopback WebSocket):  {served_rate:10.0f}")
    print(f"  bare WebSocket, no env:       {bare_rate:10.0f}")
    print(f"  served / in-process: {served_rate / local_rate:.3f} (goal >= {THROUGHPUT_GOAL})")
    print(f"  bare / in-process:   {bare_rate / local_rate:.3f} (the transport's ceiling)")
    print(f"  served / bare:       {served_rate / bare_rate:.3f}")


if __name__ == "__main__":
    main()
